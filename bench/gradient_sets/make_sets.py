"""Writes the gradient sets of bench/grouped.py as data (JSON lists of parameter shapes, in model order).

    python bench/gradient_sets/make_sets.py          # rewrites resnet50.json, bert_base.json, latency_1000.json

ResNet-50: torchvision's resnet50() parameters (conv weights without bias, BatchNorm weight and bias,
fc weight and bias): 161 arrays, 25 557 032 parameters. BERT-base: Hugging Face BertModel (uncased,
vocabulary 30 522, with pooler): 199 arrays, 109 482 240 parameters. latency_1000: 1000 float32
arrays of 256 B - 4 KiB (64-1024 elements, uniform, seed 21), like a transformer's biases and norms.
"""

from __future__ import annotations

import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def resnet50() -> list[tuple[str, list[int]]]:
    """Parameter names and shapes of torchvision's resnet50()."""
    out: list[tuple[str, list[int]]] = []

    def bn(name: str, c: int) -> None:
        out.append((f"{name}.weight", [c]))
        out.append((f"{name}.bias", [c]))

    out.append(("conv1.weight", [64, 3, 7, 7]))
    bn("bn1", 64)
    inplanes = 64
    for li, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for b in range(blocks):
            p = f"layer{li}.{b}"
            out.append((f"{p}.conv1.weight", [planes, inplanes, 1, 1]))
            bn(f"{p}.bn1", planes)
            out.append((f"{p}.conv2.weight", [planes, planes, 3, 3]))
            bn(f"{p}.bn2", planes)
            out.append((f"{p}.conv3.weight", [planes * 4, planes, 1, 1]))
            bn(f"{p}.bn3", planes * 4)
            if b == 0:
                out.append((f"{p}.downsample.0.weight", [planes * 4, inplanes, 1, 1]))
                bn(f"{p}.downsample.1", planes * 4)
            inplanes = planes * 4
    out.append(("fc.weight", [1000, 2048]))
    out.append(("fc.bias", [1000]))
    return out


def bert_base() -> list[tuple[str, list[int]]]:
    """Parameter names and shapes of Hugging Face's BertModel for bert-base-uncased."""
    h, inter, vocab, pos, types, layers = 768, 3072, 30522, 512, 2, 12
    out: list[tuple[str, list[int]]] = [
        ("embeddings.word_embeddings.weight", [vocab, h]),
        ("embeddings.position_embeddings.weight", [pos, h]),
        ("embeddings.token_type_embeddings.weight", [types, h]),
        ("embeddings.LayerNorm.weight", [h]),
        ("embeddings.LayerNorm.bias", [h]),
    ]
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for m in ("query", "key", "value"):
            out.append((f"{p}.attention.self.{m}.weight", [h, h]))
            out.append((f"{p}.attention.self.{m}.bias", [h]))
        out.append((f"{p}.attention.output.dense.weight", [h, h]))
        out.append((f"{p}.attention.output.dense.bias", [h]))
        out.append((f"{p}.attention.output.LayerNorm.weight", [h]))
        out.append((f"{p}.attention.output.LayerNorm.bias", [h]))
        out.append((f"{p}.intermediate.dense.weight", [inter, h]))
        out.append((f"{p}.intermediate.dense.bias", [inter]))
        out.append((f"{p}.output.dense.weight", [h, inter]))
        out.append((f"{p}.output.dense.bias", [h]))
        out.append((f"{p}.output.LayerNorm.weight", [h]))
        out.append((f"{p}.output.LayerNorm.bias", [h]))
    out.append(("pooler.dense.weight", [h, h]))
    out.append(("pooler.dense.bias", [h]))
    return out


def latency_1000() -> list[tuple[str, list[int]]]:
    """1000 arrays of 64-1024 float32 elements (256 B - 4 KiB), seeded."""
    rng = random.Random(21)
    return [(f"p{i}", [rng.randint(64, 1024)]) for i in range(1000)]


def main() -> None:
    for name, fn in (("resnet50", resnet50), ("bert_base", bert_base), ("latency_1000", latency_1000)):
        params = fn()
        total = 0
        for _, shape in params:
            n = 1
            for d in shape:
                n *= d
            total += n
        head = {"name": name, "dtype": "float32", "arrays": len(params), "parameters": total}
        lines = [json.dumps({"name": k, "shape": s}) for k, s in params]
        with open(os.path.join(HERE, f"{name}.json"), "w") as f:
            f.write(json.dumps(head)[:-1] + ', "shapes": [\n' + ",\n".join(lines) + "\n]}\n")
        print(name, len(params), total)


if __name__ == "__main__":
    main()
