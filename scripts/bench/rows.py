"""What each verdict row says of a run's figures, and whether its target was met: one function a measure.

Each takes the run's ``measures`` and returns (result, met); the measure's number, name and target are
the registry's (scripts/bench/measures.py). Rows 10, 14 and 15 are built beside their measures.
"""

from __future__ import annotations

from bench.common import MIB


def cold_fetch(m: dict) -> tuple[str, bool]:
    """Row 1: bake against the physical limit, aria2c and s3tokenizer's own loop."""
    cold = m["cold_fetch"]
    n, rate, mib = cold["connections"], cold["rate_per_connection"] / MIB, cold["size_bytes"] / MIB
    speedup, vs_aria, vs_raw = cold["speedup_vs_baseline"], cold["vs_aria2c"], cold["vs_aria2c_transfer_only"]
    return (
        f"{mib:.0f} MiB, {rate:g} MiB/s per connection; limit {n} x {rate:g} MiB/s: "
        f"{cold['limit_seconds']:.1f} s. bake ({n} conn) {cold['bake_seconds']:.2f} s; aria2c ({n} conn) "
        f"{cold['aria2c_seconds']:.2f} s with --checksum, {cold['aria2c_transfer_only_seconds']:.2f} s "
        f"without; baseline {cold['baseline_seconds']:.1f} s; bake default "
        f"({cold['bake_default_connections']} conn) {cold['bake_default_seconds']:.1f} s. "
        f"bake = {speedup:.2f}x baseline, {vs_aria:.3f}x / {vs_raw:.3f}x aria2c (with / without "
        f"checksum), {cold['bake_vs_limit']:.3f}x the limit",
        speedup >= 6 and min(vs_aria, vs_raw) >= 0.95,
    )


def interrupted(m: dict) -> tuple[str, bool]:
    """Row 2."""
    cut = m["interrupted"]
    return (
        f"bytes sent / file size: bake {cut['bake_ratio']:.3f} ({cut['bake_seconds']:.1f} s); baseline "
        f"{cut['baseline_ratio']:.3f} ({cut['baseline_runs']} runs, {cut['baseline_seconds']:.1f} s)",
        cut["bake_ratio"] <= 1.1,
    )


def verify_overhead(m: dict) -> tuple[str, bool]:
    """Row 3."""
    ver = m["verify_overhead"]
    return (
        f"bake {ver['bake_seconds']:.2f} s / {ver['transfer_only']} "
        f"{ver['transfer_only_seconds']:.2f} s = {ver['ratio']:.3f}",
        ver["ratio"] <= 1.10,
    )


def warm_rebuild(m: dict) -> tuple[str, bool]:
    """Row 4."""
    warm = m["warm_rebuild"]
    return (
        f"{warm['warm_asset_bytes']} asset bytes from the mirror (cold: "
        f"{warm['cold_asset_bytes'] / MIB:.0f} MiB); {warm['warm_seconds']:.1f} s vs "
        f"{warm['cold_seconds']:.1f} s cold",
        warm["warm_asset_bytes"] == 0,
    )


def base_bump(m: dict) -> tuple[str, bool]:
    """Row 5."""
    bump = m["base_bump"]
    return (
        f"asset layer: {bump['asset_layer_bytes_uploaded']} bytes uploaded "
        f"({bump['asset_layer_status']}; first push uploaded "
        f"{bump['first_push_asset_layer_bytes'] / MIB:.0f} MiB), {bump['build_asset_bytes_from_mirror']} "
        f"bytes from the mirror, same diff-ID: {bump['same_asset_layer']}",
        bump["asset_layer_bytes_uploaded"] == 0,
    )


def fresh_builder(m: dict) -> tuple[str, bool]:
    """Row 6: the fresh builder, and the vLLM stand-in's two ci_base versions."""
    fresh, warm = m["fresh_builder"], m["warm_rebuild"]
    fleet = fresh["fleet"]
    return (
        f"{fresh['origin_asset_bytes']} asset bytes from the origin mirror (the assets image, "
        f"{fresh['registry_asset_bytes'] / MIB:.0f} MiB, came from the registry); "
        f"{fresh['seconds']:.1f} s vs "
        f"{warm['cold_seconds']:.1f} s cold; the same layers as before the wipe: "
        f"{fresh['same_asset_layer']}. "
        f"vLLM stand-in (bake pin, its own wrapper): ci_base v1 and v2 the same asset layers "
        f"{fleet['same_asset_layer']}, "
        f"asset blob uploaded again: {fleet['asset_blob_uploaded']}",
        fresh["origin_asset_bytes"] == 0,
    )


def entrypoint(m: dict) -> tuple[str, bool]:
    """Row 7: the entrypoint with two files."""
    ep = m["entrypoint"]
    return (
        f"{ep['overhead_ms']:.2f} ms over `true` with every location served: median of {ep['runs']}, "
        f"{ep['median_ms_entrypoint_true']:.2f} ms `bake-entrypoint true` vs "
        f"{ep['median_ms_true']:.2f} ms `true` ({ep['shell']}); {ep['overhead_ms_unset']:.2f} ms with "
        "TIKTOKEN_* unset (two job-local directories made at each start)",
        ep["overhead_ms"] <= 5,
    )


def agent_pull(m: dict) -> tuple[str, bool]:
    """Row 8: an agent pulls the stand-in's ci_base twice, on each image store."""
    agents = m["fresh_builder"]["fleet"]["agent"]
    seen = "; ".join(
        f"{store} store: v1 {agent['v1_asset_layer_bytes'] / MIB:.0f} MiB of asset layer "
        f"({agent['v1_seconds']:.1f} s), v2 asset layer {agent['v2_asset_layer_status']!r}, "
        f"{agent['v2_asset_layer_bytes']} asset bytes, {agent['v2_bytes']} bytes in all "
        f"({agent['v2_seconds']:.1f} s)"
        for store, agent in agents.items()
    )
    return (
        "an empty engine pulls the stand-in's ci_base v1, then v2 (requirements changed, same manifest; "
        f"the block sits above the requirements): {seen}",
        agents["containerd"]["v2_asset_layer_bytes"] == 0,
    )


def scale(m: dict) -> tuple[str, bool]:
    """Row 9: the entrypoint at scale, and the Python side at many Hub files."""
    sc = m["scale"]
    small, large = (str(c) for c in sc["ratio_of"])
    big = sc["files"][large]
    # bake's own cases; cp -rs is the floor beside them, whose own growth is the filesystem's.
    bakes = {case: ratio for case, ratio in sc["ratios"].items() if case != "cp -rs"}
    worst = max(bakes, key=bakes.get)
    fresh_ok = all(big[c] <= 100 or big[c] <= 1.5 * big["cp -rs"] for c in ("fresh", "empty"))
    return (
        f"{large} files: fresh {big['fresh']:.0f} ms, empty {big['empty']:.0f} ms (cp -rs of the "
        f"tree {big['cp -rs']:.0f} ms), served {big['served']:.1f} ms; node first {big['node']:.0f} ms, "
        f"served {big['node served']:.1f} ms; Hub fresh {big['hub fresh']:.1f} ms, served "
        f"{big['hub served']:.1f} ms. {large} vs {small} files: at most {bakes[worst]:.1f}x "
        f"({worst}; cp -rs itself {sc['ratios']['cp -rs']:.1f}x). {sc['hub_files']} Hub files: digest "
        f"{sc['digest_seconds']:.2f} s, seal "
        f"{sc['seal_seconds']:.2f} s ({sc['shell']}); harvest of {sc['harvest_files']} cached Hub "
        f"files {sc['harvest_seconds']:.2f} s, {sc['harvest_not_pinned']} of {sc['harvest_bad_files']} "
        "bad ones named",
        fresh_ok
        and big["served"] <= 20
        and bakes[worst] <= 12
        and max(sc["digest_seconds"], sc["seal_seconds"]) <= 2
        and sc["harvest_seconds"] <= 5
        and sc["harvest_not_pinned"] == sc["harvest_bad_files"],
    )


def cold_pull(m: dict) -> tuple[str, bool]:
    """Row 11: a cold pull of one unit, three ways, by three pullers, against the floor and the raw bytes'."""
    pull = m["cold_pull"]
    columns = {"classic": "classic", "containerd": "containerd", "containerd_daemon": "containerd alone"}
    parts, bake_ratios = [], []
    for kind, row in pull["variants"].items():
        seen = ", ".join(
            f"{name} {row[f'{key}_seconds']:.2f} s "
            f"({row[f'{key}_vs_floor']:.2f}; raw {row[f'{key}_vs_raw_floor']:.2f})"
            for key, name in columns.items()
        )
        blob = f"{row['blob_bytes'] / MIB:.0f} MiB blob"
        fetch, unpack = row["containerd_fetch_seconds"], row["containerd_unpack_seconds"]
        steps = f"containerd's fetch {fetch:.2f} s + unpack {unpack:.2f} s"
        parts.append(f"{kind} ({blob}): floor {row['floor_seconds']:.2f} s, {seen}; {steps}")
        if kind.startswith("bake"):
            bake_ratios += [row[f"{key}_vs_floor"] for key in columns]
    return (
        f"{pull['size_bytes'] / MIB:.0f} MiB of random bytes, one unit, median of {pull['repeats']}; "
        "pull time (floor / pull; the raw bytes' floor / pull): " + "; ".join(parts),
        min(bake_ratios) >= 0.9,
    )


def changes(m: dict) -> tuple[str, bool]:
    """Row 12: each change's cost to the builder and to an agent, per place of the block and per store."""
    ch = m["changes"]
    parts, met = [], True
    for place, found in ch["places"].items():
        for i, version in enumerate(found["versions"][1:], 1):
            pulls = {store: rows[i] for store, rows in found["pulls"].items()}
            parts.append(
                f"{place}, {version['change']}: build {version['seconds']:.1f} s, "
                f"{len(version['steps_rerun'])} of ci_base's own steps re-run, slow steps cached "
                f"{version['slow_steps_cached']}; "
                + ", ".join(
                    f"{store} pulls {row['bytes'] / MIB:.1f} MiB "
                    f"({row['asset_bytes'] / MIB:.1f} MiB of assets"
                    + (f", {row['ratio']:.2f}x the changed unit and index)" if row["ratio"] else ")")
                    for store, row in pulls.items()
                )
            )
            if place == "after the slow steps":
                box = pulls["containerd"]
                if version["change"] == "change the requirements":
                    met = met and box["asset_bytes"] == 0
                else:
                    met = met and version["slow_steps_cached"] and (box["ratio"] or 0) <= 1.05
    return (
        f"three units of {ch['unit_bytes'] / MIB:.0f} MiB, a {ch['small_bytes'] / MIB:.0f} MiB asset "
        "added, "
        f"slow steps {ch['heavy_cpu_seconds']} CPU s: " + "; ".join(parts),
        met,
    )
