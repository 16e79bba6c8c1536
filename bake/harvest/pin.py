"""Turning what the caches hold into manifest entries, against a manifest as it is, and writing them.

The rules, applied to the manifest as it is under the edit lock (``bake.manifestedit``):

- an asset already there at the same path with the same sha256 is left as it is; with another
  sha256 it is reported, never re-pinned;
- a Hub repository already pinned at the commit the run read gets the run's other files added
  to its entry (and to its ``include``); pinned at another commit only, it is reported;
- everything else is a new entry: ``[[asset]]`` as ``bake add`` renders it, ``[[hub]]`` narrowed
  (``include``) to the files the run read, each file's sha256 proven from the cached bytes.

A manifest that does not exist yet is started. The new text must parse, and keep every asset
the old one had, before it replaces the old by a rename.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bake import manifest, manifestedit
from bake.asset import Asset
from bake.errors import ManifestError
from bake.harvest.caches import Found
from bake.hub.entry import HubEntry
from bake.hub.scan import CachedCommit, CachedFile, NotPinned

HubKey = tuple[str, str, str]  # (kind, repo, commit)


@dataclass
class Plan:
    """The entries one harvest adds to one manifest, and what it reports instead."""

    assets: list[Asset] = field(default_factory=list)
    entries: list[dict] = field(default_factory=list)
    additions: dict[HubKey, list[dict]] = field(default_factory=dict)
    problems: list[NotPinned] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.assets or self.entries or self.additions)


def file_record(f: CachedFile) -> dict:
    """One ``files`` record of a ``[[hub]]`` entry, keys in ``bake add``'s order."""
    return {"path": f.path, "size": f.size, "sha256": f.sha256, "blob": f.blob} | (
        {"lfs": True} if f.lfs else {}
    )


def label(kind: str, repo: str, commit: str) -> str:
    return f"{'datasets/' if kind == 'dataset' else ''}{repo}@{commit}"


def merged_commits(commits: Sequence[CachedCommit], problems: list[NotPinned]) -> dict[HubKey, CachedCommit]:
    """One commit per repository and commit (several DIRs may hold it), its files united.

    A path two caches hold with different bytes is reported, and dropped.
    """
    merged: dict[HubKey, CachedCommit] = {}
    for c in commits:
        key = (c.kind, c.repo, c.commit)
        if key not in merged:
            merged[key] = c
            continue
        files = {f.path: f for f in merged[key].files}
        for f in c.files:
            if files.setdefault(f.path, f) != f:
                problems.append(
                    NotPinned(
                        f"{c.folder}/snapshots/{c.commit}/{f.path}", "two caches hold different bytes for it"
                    )
                )
                files.pop(f.path)
        merged[key] = replace(merged[key], files=tuple(sorted(files.values(), key=lambda f: f.path)))
    return merged


def _existing_entries(assets: Sequence[Asset]) -> dict[HubKey, HubEntry]:
    return {(e.kind, e.repo, e.commit): e for a in assets if a.hub is not None for e in a.hub.entries}


def _plan_assets(found: Found, assets: Sequence[Asset], groups: Sequence[str], plan: Plan) -> None:
    by_path = {a.path: a for a in assets}
    names = {a.name for a in assets}
    for a in found.assets:
        there = by_path.get(a.path)
        if there is not None:
            if there.sha256 != a.sha256:
                plan.problems.append(
                    NotPinned(
                        a.path,
                        f"asset {there.name!r} pins it with sha256 {there.sha256}, the cache holds "
                        f"{a.sha256}; not re-pinned: check which bytes the job should get",
                    )
                )
            continue
        name = a.name if a.name not in names else f"{a.name}-{a.sha256[:12]}"
        new = replace(a, name=name, groups=tuple(groups))
        by_path[a.path] = new
        names.add(name)
        plan.assets.append(new)


def _plan_commit(c: CachedCommit, entries: dict[HubKey, HubEntry], groups: Sequence[str], plan: Plan) -> None:
    key = (c.kind, c.repo, c.commit)
    entry = entries.get(key)
    if entry is None:
        others = sorted(e.commit for k, e in entries.items() if k[:2] == key[:2])
        if others:
            plan.problems.append(
                NotPinned(
                    label(*key),
                    f"the manifest pins {c.repo} at {', '.join(others)}, the run read commit "
                    f"{c.commit}; not re-pinned: remove the old entry and harvest again to move the pin",
                )
            )
            return
        plan.entries.append(
            {
                "repo": c.repo,
                "type": c.kind if c.kind != "model" else None,
                "commit": c.commit,
                "ref": c.ref,
                "include": [f.path for f in c.files],
                "groups": list(groups),
                "files": [file_record(f) for f in c.files],
            }
        )
        return
    pinned = {f.path: f for f in entry.files}
    added = []
    for f in c.files:
        there = pinned.get(f.path)
        if there is not None:
            if (there.size, there.sha256) != (f.size, f.sha256):
                plan.problems.append(
                    NotPinned(
                        f"{label(*key)}/{f.path}",
                        f"pinned with sha256 {there.sha256}, the cache holds {f.sha256}",
                    )
                )
        elif entry.whole_repo:
            plan.problems.append(
                NotPinned(
                    f"{label(*key)}/{f.path}", "the manifest pins that commit whole, and it has no such file"
                )
            )
        else:
            added.append(file_record(f))
    if added:
        plan.additions[key] = added


def make_plan(found: Found, assets: Sequence[Asset], groups: Sequence[str]) -> Plan:
    """What harvesting ``found`` into a manifest holding ``assets`` adds, and what it reports."""
    plan = Plan()
    _plan_assets(found, assets, groups, plan)
    entries = _existing_entries(assets)
    for c in merged_commits(found.commits, plan.problems).values():
        _plan_commit(c, entries, groups, plan)
    return plan


def _with_additions(text: str, additions: dict[HubKey, list[dict]]) -> str:
    """``text`` with each addition's file records (and paths, where it has an ``include``) in its entry."""
    if not additions:
        return text
    import tomlkit  # lazily: only an edit of an existing entry needs it

    doc = tomlkit.parse(text)
    for table in doc.get("hub", []):
        key = (table.get("type", "model"), table["repo"], table["commit"])
        for record in additions.get(key, []):
            inline = tomlkit.inline_table()
            inline.update(record)
            table["files"].append(inline)
            if "include" in table:
                table["include"].append(record["path"])
    return tomlkit.dumps(doc)


def new_text(text: str, plan: Plan) -> str:
    """The manifest text with the plan's entries: additions in place, new entries appended."""
    from bake.add import render_entry  # lazily: the renderers of `bake add`, one of each
    from bake.add.hub_repo import entry_text

    text = _with_additions(text, plan.additions)
    for asset in plan.assets:
        text = manifestedit.appended(text, render_entry(asset))
    for entry in plan.entries:
        text = manifestedit.appended(text, entry_text(entry))
    return text


def read_existing(path: Path) -> tuple[str, manifest.Manifest]:
    """The manifest's text and assets; no assets for a manifest that does not exist, or holds no entry
    yet (only comments or consumers), which harvest starts as ``bake add`` does."""
    if not path.exists() and not path.is_symlink():
        return "", manifest.Manifest(())
    text = manifest.read_manifest_text(path)
    return text, manifest.parse_manifest(text, source=str(path), allow_http=True, allow_empty=True)


def harvest_into(path: Path, found: Found, groups: Sequence[str]) -> Plan:
    """Add ``found``'s pinnable entries to the manifest at ``path`` (started if missing); return the plan.

    Raises ManifestError/UsageError (exit 2, nothing written) when the manifest is bad, cannot be
    locked or written, or the result would not keep it whole.
    """
    if path.exists() and not path.is_file():
        raise ManifestError(f"--manifest {path}: not a file")
    with manifestedit.locked(path) as target:
        text, assets = read_existing(target)  # as it is now, under the lock
        plan = make_plan(found, assets, groups)
        if plan.empty:
            return plan
        text = new_text(text, plan)
        after = manifest.parse_manifest(text, source=str(path), allow_http=True)
        kept = {(a.path, a.sha256) for a in after}
        if not all((a.path, a.sha256) in kept for a in assets):
            raise ManifestError(f"{path}: the harvest would change other entries; nothing was written")
        manifestedit.replace(target, text)
    return plan
