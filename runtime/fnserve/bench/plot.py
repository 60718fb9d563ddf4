"""The sweep's chart: latency percentiles against throughput, one line per percentile."""

from __future__ import annotations

from pathlib import Path

from fnserve.bench.report import PERCENTILES, Sweep


def save_plot(sweep: Sweep, path: Path) -> None:
    """Write a PNG (or any format matplotlib knows from the suffix) of the sweep.

    Each point is one concurrency step, labelled `c=N`; the title names model, protocol and
    the date the sweep started.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    steps = [s for s in sweep.steps if s.client.requests]
    batch = sweep.options.batch_size
    throughput = [s.infer_per_s(batch) for s in steps]
    figure, axes = plt.subplots(figsize=(8, 5), dpi=110)
    for q, marker in zip(PERCENTILES, "osD^", strict=True):
        latency = [getattr(s.client, f"p{q}_ms") for s in steps]
        axes.plot(throughput, latency, marker=marker, label=f"p{q}")
    top = [s.client.p99_ms or 0.0 for s in steps]
    for step, x, y in zip(steps, throughput, top, strict=True):
        axes.annotate(
            f"c={step.concurrency}",
            (x, y),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=8,
        )
    o = sweep.options
    axes.set(
        xlabel="throughput (inferences/s)",
        ylabel="latency (ms)",
        title=f"{o.model} over {o.encoding}, {sweep.started:%Y-%m-%d %H:%M}",
    )
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0, top=max(top, default=1.0) * 1.15 or 1.0)
    axes.grid(True, alpha=0.3)
    axes.legend(title="latency percentile")
    figure.text(
        0.99,
        0.01,
        f"fnserve bench, Locust {sweep.locust_version}, batch {batch}, {o.duration_s:g} s per step",
        ha="right",
        fontsize=7,
        color="gray",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, bbox_inches="tight")
    plt.close(figure)
