"""The build context: the check that tracked content matches HEAD, and the export of HEAD's tree.

``check`` compares the index and the working tree with HEAD (``dockerignore`` decides which
untracked files a context takes); ``export`` writes HEAD's tree with normal modes; ``git`` runs git.
"""

from bake.context.check import LISTING_LIMIT, ContextReport, check_context
from bake.context.export import export_context

__all__ = ["LISTING_LIMIT", "ContextReport", "check_context", "export_context"]
