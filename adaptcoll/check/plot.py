"""The check's PNG: per collective, the ratio native/adaptcoll against message size with its 95% CI
(needs matplotlib: `pip install "adaptcoll[bench]"`)."""

from __future__ import annotations

from typing import Any

__all__ = ["require_matplotlib", "write_png"]


def require_matplotlib() -> None:
    """ValueError with the fix if matplotlib is missing (checked before any MPI work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError('--png needs matplotlib: pip install "adaptcoll[bench]" (or pip install matplotlib)') from None


def write_png(doc: dict[str, Any], path: str) -> None:
    """One panel per collective (host and device), one line per adaptcoll implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = doc.get("speed") or []
    order = {"bcast": 0, "reduce": 1, "allreduce": 2, "iallreduce": 3}
    panels = sorted({(c["collective"], c["device"]) for c in cells}, key=lambda p: (p[1], order.get(p[0], 9), p[0]))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.2 * max(1, len(panels)), 3.6), squeeze=False)
    for ax, (coll, device) in zip(axes[0], panels):
        mine = [c for c in cells if c["collective"] == coll and c["device"] == device]
        for impl in dict.fromkeys(c["impl"] for c in mine):
            rows = sorted((c for c in mine if c["impl"] == impl), key=lambda c: c["size"])
            x = [c["size"] for c in rows]
            y = [c["ratio"] for c in rows]
            err = [[c["ratio"] - c["ci_low"] for c in rows], [c["ci_high"] - c["ratio"] for c in rows]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=impl)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_title(f"{coll}{' (device)' if device else ''}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("native time / adaptcoll time")
    axes[0][-1].legend(fontsize=7)
    env = doc["environment"]
    library = " ".join(env["mpi_library"].split())[:60]
    fig.suptitle(f"adaptcoll check: {env['ranks']} ranks, {library} (> 1: adaptcoll faster)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
