"""Where a consumer looks for its files: the ``$VAR`` / ``${VAR:-DEFAULT}/SUB`` grammar, parsed and resolved.

The entrypoint reads these rules as data (``bake.serve``), so the grammar is
deliberately tiny: no command substitution, no other expansion, nothing a shell
would have to evaluate.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bake import servefile
from bake.errors import ManifestError

_VAR = r"[A-Za-z_][A-Za-z0-9_]*"
_EXPORT = re.compile(rf"\$({_VAR})")
_UNDER = re.compile(rf"\$\{{({_VAR}):-([^{{}}]*)\}}(?:/(.*))?")
# A plain path component: no separator, no control character, nothing a shell would expand or quote.
_COMPONENT = re.compile(r"[^/\x00-\x1f\x7f$`\\\"'{}]+")
GRAMMAR = "$VAR or ${VAR:-DEFAULT}/SUB (DEFAULT absolute or $HOME/…, SUB plain path components)"


@dataclass(frozen=True)
class Location:
    """One lookup location: ``$VAR`` (neither ``default`` nor ``fallback``) or ``${VAR:-BASE}/SUB``.

    BASE is ``default`` (an absolute path or ``$HOME/…``) or, for a library with a
    precedence of its own (huggingface_hub: HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE,
    then HF_HOME/hub, …), the directory another location resolves to: ``fallback``.
    """

    var: str
    sub: str = ""
    default: str | None = None
    fallback: Location | None = None

    @property
    def mode(self) -> str:
        """``export`` for ``$VAR`` (the entrypoint exports a job-local one when unset), else ``under``."""
        return "export" if self.default is None and self.fallback is None else "under"

    @classmethod
    def from_record(
        cls, mode: str, var: str, sub: str, base: str, earlier: Mapping[str, Location]
    ) -> Location:
        """Rebuild a location from the fields of its ``loc`` record; ``earlier`` maps the IDs above it."""
        if mode == "export":
            return cls(var)
        if base.startswith("@"):
            return cls(var, sub, fallback=earlier[base[1:]])
        return cls(var, sub, default=base)

    def __str__(self) -> str:
        if self.mode == "export":
            return f"${self.var}"
        base = self.default if self.fallback is None else str(self.fallback)
        return f"${{{self.var}:-{base}}}" + (f"/{self.sub}" if self.sub else "")

    def record(self, loc_id: str, consumer: str, fallback_id: str | None = None) -> servefile.Loc:
        """Return this location's ``loc`` record for ``bake.serve`` (``fallback_id``: its fallback's ID)."""
        base = f"@{fallback_id}" if self.fallback is not None else self.default or ""
        return servefile.Loc(loc_id, consumer, self.mode, self.var, self.sub, base)

    def records(self, loc_id: str, consumer: str, chain_ids: Mapping[str, str]) -> list[servefile.Loc]:
        """Return the ``loc`` records of its fallback chain, then its own, each after its fallback.

        ``chain_ids`` gives each fallback's ID by its variable; a fallback serves no file of its
        own, so its consumer field is ``-``.
        """
        if self.fallback is None:
            return [self.record(loc_id, consumer)]
        fallback_id = chain_ids[self.fallback.var]
        chain = self.fallback.records(fallback_id, "-", chain_ids)
        return [*chain, self.record(loc_id, consumer, fallback_id)]

    def symbolic_paths(self) -> list[tuple[str, ...]]:
        """Return the symbolic paths this location can resolve to, as component tuples.

        Two locations nest when a path of one is a prefix of a path of the other.
        """
        sub = tuple(self.sub.split("/")) if self.sub else ()
        keys = [(f"${self.var}", *sub)]
        if self.fallback is not None:
            keys += [(*base, *sub) for base in self.fallback.symbolic_paths()]
        elif self.default is not None:
            base = ("$HOME",) if self.default.startswith("$HOME") else ("/",)
            rest = self.default.removeprefix("$HOME").strip("/")
            keys.append((*base, *(rest.split("/") if rest else ()), *sub))
        return keys

    def nests_with(self, other: Location) -> bool:
        """Return True when one location can lie inside (or be) the other."""
        return any(
            a[: len(b)] == b or b[: len(a)] == a
            for a in self.symbolic_paths()
            for b in other.symbolic_paths()
        )

    def resolve(self, environ: Mapping[str, str]) -> Path | None:
        """Return the directory the consumer looks in under ``environ``; None for ``$VAR`` when VAR is
        unset or empty.

        This is bake's one location resolver: doctor, seal and the image probes all use it.
        A relative value resolves against the working directory, as the consumers do, and so does
        a set but empty VAR of ``${VAR:-BASE}``: the libraries read it with ``os.getenv(VAR, BASE)``
        (huggingface_hub's constants, s3tokenizer), and "" joined to SUB is SUB. The entrypoint
        never serves that reading: it serves BASE and exports VAR with that value, after which
        this resolver, the library and the entrypoint agree.
        """
        value = environ.get(self.var)
        if value == "" and self.mode == "export":
            value = None  # tiktoken reads an empty one as "no cache"; the entrypoint exports one
        if value is None and self.fallback is not None:
            base = self.fallback.resolve(environ)
            value = None if base is None else str(base)
        elif value is None and self.default is not None:
            rest = self.default.removeprefix("$HOME") if self.default.startswith("$HOME") else None
            value = self.default if rest is None else _home(environ) + rest
        if value is None:
            return None
        return Path(os.path.abspath(os.path.join(value, self.sub) if self.sub else value))


def _home(environ: Mapping[str, str]) -> str:
    """HOME, or the password database's entry when it is unset, as the entrypoint does."""
    home = environ.get("HOME")
    if home:
        return home
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return "/"


def _components(text: str) -> bool:
    return all(_COMPONENT.fullmatch(c) and c not in (".", "..") for c in text.split("/"))


def parse_location(text: object, where: str) -> Location:
    """Parse one location in the contract's grammar. Raises ManifestError naming ``where``."""
    if not isinstance(text, str):
        raise ManifestError(f"{where}: location {text!r} must be a string in the form {GRAMMAR}")
    match = _EXPORT.fullmatch(text)
    if match:
        location = Location(match.group(1))
    else:
        match = _UNDER.fullmatch(text)
        if not match:
            raise ManifestError(f"{where}: location {text!r} is not {GRAMMAR}; nothing else is expanded")
        var, default, sub = match.group(1), match.group(2), match.group(3) or ""
        home_rest = default.removeprefix("$HOME") if default.startswith("$HOME") else None
        if home_rest is not None:
            ok = home_rest == "" or (home_rest.startswith("/") and _components(home_rest[1:]))
        else:
            ok = default == "/" or (default.startswith("/") and _components(default[1:]))
        if not ok:
            raise ManifestError(
                f"{where}: location {text!r}: default {default!r} must be an absolute path or $HOME/…, "
                "with plain components (no '.', '..', empty parts or expansions)"
            )
        if sub and not _components(sub):
            raise ManifestError(
                f"{where}: location {text!r}: {sub!r} must be plain path components "
                "(no '.', '..', empty parts or expansions)"
            )
        location = Location(var, sub, default)
    if servefile.refused_var(location.var):
        raise ManifestError(
            f"{where}: location {text!r} uses ${location.var}, which bake may not serve: a shell, the "
            "dynamic loader or an interpreter reads it to decide what runs or where "
            f"({servefile.REFUSED_TEXT} are refused); name the library's own variable"
        )
    return location
