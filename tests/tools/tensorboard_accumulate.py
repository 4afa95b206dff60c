#!/usr/bin/env python3
"""Loads a TensorBoard run directory with TensorBoard's own EventAccumulator (PyPI's tensorboard)
and prints what TensorBoard sees, one item per line:

  scalar TAG STEP VALUE
  histo TAG STEP MIN MAX NUM SUM BUCKETS BUCKET_COUNT_SUM
  node NAME OP INPUT,INPUT,...   (the graph; "-" for no inputs)

Exit status 77 when tensorboard is not installed (the calling test skips), 1 on any error.
usage: tensorboard_accumulate.py RUN_DIR
"""
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator as ea
except Exception as e:  # noqa: BLE001 - any import failure means "no tensorboard here"
    print(f"tensorboard is not importable: {e}", file=sys.stderr)
    sys.exit(77)


def main(run_dir):
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.GRAPH: 1})
    acc.Reload()
    tags = acc.Tags()
    for tag in sorted(tags.get("scalars", [])):
        for ev in acc.Scalars(tag):
            print(f"scalar {tag} {ev.step} {ev.value!r}")
    for tag in sorted(tags.get("histograms", [])):
        for ev in acc.Histograms(tag):
            h = ev.histogram_value
            print(f"histo {tag} {ev.step} {h.min!r} {h.max!r} {h.num!r} {h.sum!r} "
                  f"{len(h.bucket)} {sum(h.bucket)!r}")
    if tags.get("graph"):
        for node in acc.Graph().node:
            print(f"node {node.name} {node.op} {','.join(node.input) or '-'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
