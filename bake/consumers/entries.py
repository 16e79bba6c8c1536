"""The consumer table: each library that looks for baked files in its own places, as one entry of data.

A consumer owns the assets under ``<name>/``. Its entry is data: where the library looks
(``bake.locations``), which libraries speak for it, what bake exports to keep them offline.
Its methods only say which rule of each job is its own; the rules live in the job's module:
naming (``naming``), the library's own table (``libraries``, ``vllm_assets``) and the records
of ``bake.serve`` (``serve``). Doctor's checks find an entry's own by its class (``checks``).
The built-ins are s3tokenizer, the tiktoken family, the Hugging Face Hub and vLLM's public
test assets; a manifest declares more with ``[[consumer]]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

from bake import servefile
from bake.consumers import libraries, naming, serve, vllm_assets
from bake.consumers.naming import AssetLike
from bake.consumers.serve import BakedFile
from bake.errors import ManifestError
from bake.hub import layout
from bake.hub.entry import PREFIX as HUB_PREFIX
from bake.hub.entry import HubEntry
from bake.locations import Location, parse_location
from bake.tomlkeys import expect_mapping, refuse_unknown_keys

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONSUMER_KEYS = {"name", "locations"}


class Consumer:
    """One entry of the table. The base class is a declared consumer: nested names, no library table.

    Subclasses (the built-ins) set their data and name their naming rule, alias links and
    library table; the Hub, with a layout of its own, also names the files seal writes and
    the records it serves.
    """

    builtin = False
    # The distributions whose own lookups `bake doctor` checks; a declared consumer names none.
    libraries: tuple[str, ...] = ()
    # Those among them whose own sha256 table `manifest check` and `doctor` read.
    tables: tuple[str, ...] = ()
    # The loc IDs of a location's fallbacks, by variable (a consumer with a precedence of its own).
    chain_ids: Mapping[str, str] = {}
    # The library's own "never download" switches, (VAR, VALUE) with VALUE a word or @PATH in the asset
    # root: seal writes them to bake.offline, the entrypoint exports them under BAKE_OFFLINE=1.
    offline: tuple[tuple[str, str], ...] = ()
    # An entry `bake add` or `bake harvest` names keeps its file's suffix (vLLM's stop_sign.jpg and
    # stop_sign.pt are two assets); else the name is the file's stem (a model's name).
    names_keep_suffix = False
    # A name a download still in progress has in one of its locations, and why it is not a file to pin.
    partial = re.compile(r"\.(?:tmp|part|incomplete)\Z")
    partial_why = "a partial download (its name ends .tmp, .part or .incomplete): let the job finish it"
    # The libraries' default directories (under TMPDIR), which name a cache of theirs by its place.
    default_dirs: tuple[str, ...] = ()

    def __init__(self, name: str, locations: Sequence[Location]) -> None:
        self.name = name
        self.locations = tuple(locations)

    @property
    def prefix(self) -> str:
        return f"{self.name}/"

    def owns(self, path: str) -> bool:
        return path.startswith(self.prefix)

    def name_in_location(self, path: str) -> str:
        """Return the file's relative path inside each location (the path below the prefix)."""
        return path[len(self.prefix) :]

    def check_path(self, asset: AssetLike, where: str) -> None:
        """Raise ManifestError when ``asset`` breaks this consumer's naming rule (declared: any name)."""

    def path_for_url(self, url: str) -> str | None:
        """Return the manifest path ``bake add`` gives this URL, or None when it is not this consumer's."""
        return None

    def known_urls(self) -> tuple[str, ...]:
        """The URLs the installed library's own table downloads from (``bake harvest`` names files so)."""
        return ()

    def url_for_cached(self, name: str) -> str | None:
        """The URL the installed library itself would have fetched the cached file ``name`` from, or None."""
        return None

    def why_unnamed(self, name: str) -> str | None:
        """Why no URL names the cached file ``name``, where the consumer can say more than harvest can."""
        return None

    def cached_name(self, name: str) -> bool:
        """Is ``name`` one this consumer's libraries give the files they cache, whatever its URL?"""
        return False

    def aliases(self, assets: Iterable[AssetLike]) -> dict[str, str]:
        """Map alias link paths (relative to the asset root) to their relative targets."""
        return {}

    def seal_files(self) -> dict[str, str]:
        """Map the small files ``seal`` writes itself (paths relative to the asset root) to their text."""
        return {}

    def library_sha256(self, asset: AssetLike) -> str | None:
        """Return the sha256 the installed library itself expects for ``asset``, or None if it has none."""
        return None

    def declaration(self) -> dict:
        """Return the consumer as the manifest declares it (what the manifest digest covers)."""
        return {"name": self.name, "locations": [str(loc) for loc in self.locations]}

    def loc_records(self) -> list[servefile.Loc]:
        """Return the ``loc`` records of this consumer's locations, each after what its FALLBACK names."""
        return serve.loc_records(self.name, self.locations, self.chain_ids)

    def serve_records(self, files: Sequence[BakedFile], aliases: Mapping[str, str]) -> list[servefile.Record]:
        """Return this consumer's records of ``bake.serve`` for the baked ``files`` it owns: its locations
        mirror its asset directory (``serve.mirrored``)."""
        return serve.mirrored(self, files, aliases)


class S3Tokenizer(Consumer):
    """s3tokenizer: ``load_model(name)`` looks for ``<name>.onnx`` and checks its own ``_SHA256S``."""

    builtin = True
    libraries = tables = ("s3tokenizer",)

    def __init__(self) -> None:
        super().__init__("s3tokenizer", [parse_location("${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer", "")])

    def check_path(self, asset: AssetLike, where: str) -> None:
        naming.s3tokenizer_check(self.prefix, asset, where)

    def path_for_url(self, url: str) -> str | None:
        return naming.s3tokenizer_path(self.prefix, url)

    def known_urls(self) -> tuple[str, ...]:
        return tuple(url for url, _ in (libraries.s3tokenizer_models() or {}).values())

    def library_sha256(self, asset: AssetLike) -> str | None:
        models = libraries.s3tokenizer_models() or {}
        return models.get(PurePosixPath(asset.path).stem, ("", ""))[1] or None


class Tiktoken(Consumer):
    """The tiktoken family: openai-harmony (tiktoken-rs) and tiktoken cache a vocab as ``<sha1(url)>``."""

    builtin = True
    # Each location is read by one client: (its distribution, how it resolves the directory).
    CLIENTS = (
        ("openai-harmony", "TIKTOKEN_RS_CACHE_DIR", ("TIKTOKEN_RS_CACHE_DIR",), "tiktoken-rs-cache"),
        ("tiktoken", "TIKTOKEN_CACHE_DIR", ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"), "data-gym-cache"),
    )
    libraries = tuple(client for client, *_ in CLIENTS)
    # tiktoken's own table is Python (tiktoken_ext.openai_public); openai-harmony's is compiled in.
    tables = ("tiktoken",)
    # openai-harmony then reads <dir>/o200k_base.tiktoken (the alias links) and never downloads;
    # tiktoken has no switch: a vocab that is not baked is downloaded into its cache.
    offline = (("TIKTOKEN_ENCODINGS_BASE", "@tiktoken"),)
    partial = re.compile(r"\A[0-9a-f]{40}\.[0-9a-f-]{36}\.tmp\Z")
    partial_why = (
        "a partial download: tiktoken writes <sha1(url)>.<uuid>.tmp and renames it to <sha1(url)> when whole"
    )
    default_dirs = tuple(default for *_, default in CLIENTS)

    def __init__(self) -> None:
        super().__init__("tiktoken", [parse_location(f"${var}", "") for _, var, _, _ in self.CLIENTS])

    def cached_name(self, name: str) -> bool:
        return naming.tiktoken_cached_name(name, self.partial)

    def check_path(self, asset: AssetLike, where: str) -> None:
        naming.tiktoken_check(self.prefix, asset, where)

    def path_for_url(self, url: str) -> str | None:
        return naming.tiktoken_path(self.prefix, url)

    def known_urls(self) -> tuple[str, ...]:
        return tuple(libraries.tiktoken_hashes() or {})

    def aliases(self, assets: Iterable[AssetLike]) -> dict[str, str]:
        """``tiktoken/<encoding>.tiktoken`` links, for ``TIKTOKEN_ENCODINGS_BASE`` readers."""
        return naming.tiktoken_aliases(self.prefix, assets)

    def library_sha256(self, asset: AssetLike) -> str | None:
        return (libraries.tiktoken_hashes() or {}).get(asset.canonical_url() or "")


# huggingface_hub's precedence (its constants.py): HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE,
# then HF_HOME/hub, then ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/hub. In bake.serve each
# fallback is a ``loc`` of its own, named by HUB_CHAIN_IDS; only the last serves files.
HUB_CACHE = Location(
    "HF_HUB_CACHE",
    fallback=Location(
        "HUGGINGFACE_HUB_CACHE",
        fallback=Location(
            "HF_HOME", "hub", fallback=Location("XDG_CACHE_HOME", "huggingface", "$HOME/.cache")
        ),
    ),
)
HUB_CHAIN_IDS = {"HUGGINGFACE_HUB_CACHE": "hub.legacy", "HF_HOME": "hub.home", "XDG_CACHE_HOME": "hub.xdg"}


class Hub(Consumer):
    """The Hugging Face Hub: repositories pinned by ``[[hub]]``, baked in huggingface_hub's own cache layout.

    It owns ``hub/``, where each blob is an asset fetched like any other. Its one location
    follows huggingface_hub's precedence (``HUB_CACHE``). Built from the entries a selection
    holds whole, it gives seal the snapshot links (its aliases), the refs and tree listings,
    and the entrypoint its records, all from ``bake.hub.layout``; with no entries (a manifest
    without ``[[hub]]``) it gives none.
    """

    builtin = True
    libraries = ("huggingface_hub",)
    chain_ids = HUB_CHAIN_IDS
    offline = (("HF_HUB_OFFLINE", "1"),)

    def __init__(self, entries: Sequence[HubEntry] = ()) -> None:
        super().__init__(HUB_PREFIX, [HUB_CACHE])
        self.entries = tuple(entries)

    def check_path(self, asset: AssetLike, where: str) -> None:
        naming.hub_check(self.prefix, asset, where)

    def aliases(self, assets: Iterable[AssetLike]) -> dict[str, str]:
        """The snapshot links: ``snapshots/<commit>/<path>`` to ``../../blobs/<etag>``, relative."""
        return {self.prefix + name: to for e in self.entries for name, to in layout.snapshot_links(e).items()}

    def seal_files(self) -> dict[str, str]:
        """``refs/<ref>`` and ``trees/<commit>.json``, as huggingface_hub writes them."""
        return {self.prefix + name: text for e in self.entries for name, text in layout.data_files(e).items()}

    def serve_records(self, files: Sequence[BakedFile], aliases: Mapping[str, str]) -> list[servefile.Record]:
        """Its chain of ``loc`` records, then the layout's set, directories, placements, files and links."""
        return serve.hub(self, self.entries)


# vLLM's envs.py: $VLLM_ASSETS_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/vllm/assets; its
# base.py reads vllm_public_assets/<file> below that. In bake.serve the fallback is a loc of its own.
VLLM_ASSETS_CACHE = Location(
    "VLLM_ASSETS_CACHE",
    vllm_assets.DIRECTORY,
    fallback=Location("XDG_CACHE_HOME", "vllm/assets", "$HOME/.cache"),
)


class VllmAssets(Consumer):
    """vLLM's public test assets: ``get_vllm_public_assets`` reads ``vllm_public_assets/<file>`` under
    ``VLLM_ASSETS_CACHE``, the bucket prefix (one per asset class) dropped from the name.

    The rule is data here; where vLLM is installed, ``bake.consumers.vllm_assets`` reads what that
    vLLM does (its classes' prefixes for ``manifest check`` and ``harvest``, its envs.py for ``doctor``).
    vLLM checks no hash: any file at the name is used, so a wrong one is read, never re-fetched.
    """

    builtin = True
    # vLLM's asset classes are its table: which name under which prefix (it keeps no sha256).
    libraries = tables = ("vllm",)
    chain_ids = {"XDG_CACHE_HOME": f"{vllm_assets.DIRECTORY}.xdg"}
    names_keep_suffix = True

    def __init__(self) -> None:
        super().__init__(vllm_assets.DIRECTORY, [VLLM_ASSETS_CACHE])

    def check_path(self, asset: AssetLike, where: str) -> None:
        naming.vllm_check(self.prefix, asset, where)

    def path_for_url(self, url: str) -> str | None:
        return naming.vllm_path(self.prefix, url)

    def url_for_cached(self, name: str) -> str | None:
        return naming.vllm_url_for_cached(name)

    def why_unnamed(self, name: str) -> str | None:
        return naming.vllm_why_unnamed(self.prefix, name)


BUILTINS: tuple[Consumer, ...] = (S3Tokenizer(), Tiktoken(), Hub(), VllmAssets())


def parse_consumer(raw: object, index: int) -> Consumer:
    """Validate one ``[[consumer]]`` table and return it. Raises ManifestError naming the consumer."""
    raw = expect_mapping(raw, f"consumer #{index + 1}")
    name = raw.get("name")
    where = f"consumer {name!r}" if isinstance(name, str) and name else f"consumer #{index + 1}"
    refuse_unknown_keys(raw, _CONSUMER_KEYS, where)
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == serve.SERVE_NAME:
        raise ManifestError(
            f"{where}: name {name!r} must be a string of letters, digits, '.', '_' or '-'; "
            "it is also the path prefix the consumer owns"
        )
    if any(b.name == name for b in BUILTINS):
        raise ManifestError(f"{where}: {name!r} is a built-in consumer; give the declared one another name")
    locations = raw.get("locations")
    if not isinstance(locations, list) or not locations:
        raise ManifestError(f"{where}: locations must be a non-empty list of strings, got {locations!r}")
    return Consumer(name, [parse_location(text, where) for text in locations])


def table(declared: Sequence[Consumer] = (), hub_entries: Sequence[HubEntry] = ()) -> tuple[Consumer, ...]:
    """Return the whole table: the built-ins (the Hub with ``hub_entries``), then ``declared``.

    Raises ManifestError for a duplicate name or for two locations that nest
    inside each other (then one consumer's files would land in another's place).
    """
    every = (*(Hub(hub_entries) if isinstance(c, Hub) else c for c in BUILTINS), *declared)
    seen: set[str] = set()
    placed: list[tuple[Consumer, Location]] = []
    for consumer in every:
        if consumer.name in seen:
            raise ManifestError(f"consumer {consumer.name!r}: declared twice; give each consumer one table")
        seen.add(consumer.name)
        for loc in consumer.locations:
            clash = next(((c, other) for c, other in placed if loc.nests_with(other)), None)
            if clash:
                raise ManifestError(
                    f"consumer {consumer.name!r}: location {str(loc)!r} nests with {str(clash[1])!r} of "
                    f"consumer {clash[0].name!r}; give each consumer a place of its own"
                )
            placed.append((consumer, loc))
    return every


def owner(path: str, consumers: Iterable[Consumer]) -> Consumer | None:
    """Return the consumer that owns ``path``, or None: such an asset is baked, verified, linked nowhere."""
    return next((c for c in consumers if c.owns(path)), None)


def declared_from_serve(text: str) -> list[Consumer]:
    """Rebuild the declared consumers (their ``$VAR``/``${VAR:-D}/SUB`` locations) from ``bake.serve``.

    The image holds no manifest; doctor learns the declared consumers here. A chained
    location (a fallback ``@ID``) belongs to a consumer with a layout of its own, which the
    table knows already.
    """
    builtin = {c.name for c in BUILTINS}
    found: dict[str, list[Location]] = {}
    try:
        records = servefile.read(text).records
    except ValueError:
        return []
    for loc in records:
        if not isinstance(loc, servefile.Loc) or loc.consumer in builtin or loc.consumer == "-":
            continue
        if not loc.fallback.startswith("@"):
            found.setdefault(loc.consumer, []).append(
                Location.from_record(loc.mode, loc.var, loc.sub, loc.fallback, {})
            )
    return [Consumer(name, locs) for name, locs in found.items()]
