"""Write `bake.serve` files for the entrypoint tests, exactly as /work/notes/SERVE_FORMAT.md (v1) says.

The tests describe consumers as `Consumer` values (built-in and declared alike); `serve_text`
turns them into the file `bake seal` writes beside SHA256SUMS: `loc` lines in order, then `file`
lines, then `link` lines, each group sorted by (ID, NAME), fields separated by one TAB.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    """One lookup location: `$VAR` (mode export) or `${VAR:-FALLBACK}/SUB` (mode under)."""

    id: str
    consumer: str  # "-" for a location that only serves as another's FALLBACK
    mode: str
    var: str
    sub: str = ""
    fallback: str = ""


@dataclass(frozen=True)
class Consumer:
    """A consumer: its locations, and the baked files (asset path -> name inside each location)."""

    name: str
    locs: tuple[Loc, ...]
    files: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    locks: dict[str, str] = field(default_factory=dict)  # name -> LOCK path, when not NAME.lock
    links: dict[str, str] = field(default_factory=dict)  # link name -> relative target


def s3tokenizer(files: dict[str, int]) -> Consumer:
    """The built-in s3tokenizer entry, serving every `s3tokenizer/` asset of ``files`` (path -> size)."""
    mine = {p: p.split("/", 1)[1] for p in files if p.startswith("s3tokenizer/")}
    loc = Loc("s3tokenizer.0", "s3tokenizer", "under", "XDG_CACHE_HOME", "s3tokenizer", "$HOME/.cache")
    return Consumer("s3tokenizer", (loc,), mine, {p: files[p] for p in mine})


def tiktoken(files: dict[str, int]) -> Consumer:
    """The built-in tiktoken entry: `$TIKTOKEN_RS_CACHE_DIR` and `$TIKTOKEN_CACHE_DIR`."""
    mine = {p: p.split("/", 1)[1] for p in files if p.startswith("tiktoken/") and not p.endswith(".tiktoken")}
    locs = (
        Loc("tiktoken.0", "tiktoken", "export", "TIKTOKEN_RS_CACHE_DIR"),
        Loc("tiktoken.1", "tiktoken", "export", "TIKTOKEN_CACHE_DIR"),
    )
    return Consumer("tiktoken", locs, mine, {p: files[p] for p in mine})


def declared(name: str, location: str, files: dict[str, int]) -> Consumer:
    """A `[[consumer]]` owning every asset under ``name/``, at one location in the contract's grammar."""
    mine = {p: p.split("/", 1)[1] for p in files if p.startswith(name + "/")}
    if location.startswith("${"):
        var, rest = location[2:].split(":-", 1)
        fallback, sub = rest.split("}", 1)
        loc = Loc(f"{name}.0", name, "under", var, sub.lstrip("/"), fallback)
    else:
        loc = Loc(f"{name}.0", name, "export", location[1:])
    return Consumer(name, (loc,), mine, {p: files[p] for p in mine})


def hub(files: dict[str, int], links: dict[str, str]) -> Consumer:
    """The Hub: huggingface_hub's precedence as a chain of locations, blobs under `.locks/` locks."""
    mine = {p: p.split("/", 1)[1] for p in files if p.startswith("hub/")}
    locks = {}
    for name in mine.values():
        repo, kind, leaf = name.split("/", 2)
        if kind == "blobs":
            locks[name] = f".locks/{repo}/{leaf}.lock"
    locs = (
        Loc("hub.xdg", "-", "under", "XDG_CACHE_HOME", "huggingface", "$HOME/.cache"),
        Loc("hub.home", "-", "under", "HF_HOME", "hub", "@hub.xdg"),
        Loc("hub.0", "hub", "under", "HF_HUB_CACHE", "", "@hub.home"),
    )
    return Consumer("hub", locs, mine, {p: files[p] for p in mine}, locks, links)


def serve_text(consumers: list[Consumer]) -> str:
    """The bake.serve text for these consumers: deterministic, sorted as `bake seal` sorts it."""
    loc_lines, file_rows, link_rows = [], [], []
    for consumer in consumers:
        for loc in consumer.locs:
            loc_lines.append(["loc", loc.id, loc.consumer, loc.mode, loc.var, loc.sub, loc.fallback])
            if loc.consumer == "-":
                continue
            for asset, name in consumer.files.items():
                lock = consumer.locks.get(name, "")
                file_rows.append((loc.id, name, ["file", loc.id, asset, name, str(consumer.sizes[asset]), lock]))
            for name, target in consumer.links.items():
                link_rows.append((loc.id, name, ["link", loc.id, name, target]))
    lines = [
        *loc_lines,
        *(row for _, _, row in sorted(file_rows)),
        *(row for _, _, row in sorted(link_rows)),
    ]
    return "# bake serve v1\n" + "".join("\t".join(fields) + "\n" for fields in lines)
