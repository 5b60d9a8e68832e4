"""Built-in tuning workloads: real operator shapes from real networks (batch 1).

Every workload is one operator (or one fused operator group) exactly as it appears in ResNet-18,
ResNet-50, MobileNet-V2 (224x224 ImageNet input) or BERT-base (sequence length 128), described
by plain data so that the registry can be listed, filtered and written to JSON without TVM.
``build_prim_func`` turns a workload into a TVM ``IRModule`` (one ``main`` PrimFunc built with
``te``/``topi`` and ``te.create_prim_func``); TVM is imported only there.

Names read ``<network>.<op>.<shape>[.<params>]``:

* conv2d / fused conv: ``<H>x<W>x<CI>`` input, ``.o<CO>`` when the output channel count differs
  from the input's, ``.k<K>s<S>`` kernel and stride (padding is always ``K // 2``, as in the nets),
  e.g. ``resnet18.conv2d_nchw.56x56x64.k3s1``, ``resnet18.conv2d_nchw.56x56x64.o128.k1s2``;
* depthwise: ``<H>x<W>x<C>.k<K>s<S>`` (channel multiplier 1);
* dense: ``<M>x<K>x<N>`` (``data[M, K] @ weight[N, K]^T``);
* batch_matmul: ``<B>x<M>x<N>x<K>`` (``a[B, M, K] @ b[B, N, K]^T``, TOPI's ``transpose_b``);
* pooling: ``<H>x<W>x<C>.k<K>s<S>`` (``max_pool2d``/``avg_pool2d``) or ``<H>x<W>x<C>`` (global);
* softmax / elementwise: the tensor shape joined by ``x``.

FLOPs follow TVM's own counter (``tvm.s_tir.analysis.estimate_tir_flops``): one per multiply,
add, max/compare and divide, so a multiply-accumulate is 2; a convolution counts every tap of
the kernel (padding included), max pooling one compare per window element, average pooling one
add per window element plus one divide per output, softmax four per element (max, exp-sub, sum,
divide), a bias add and a ReLU one each per output element and a ReLU6 (clip) two.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

__all__ = [
    "Workload",
    "WORKLOADS",
    "WORKLOAD_SETS",
    "OP_CLASSES",
    "get_workload",
    "get_workloads",
    "list_sets",
    "build_prim_func",
]

# Operator classes (the ``op_class`` column downstream).
OP_CLASSES = (
    "conv2d",
    "depthwise_conv2d",
    "fused_conv2d",
    "dense",
    "batch_matmul",
    "pooling",
    "softmax",
    "elementwise",
)


@dataclass(frozen=True)
class Workload:
    """One tuning workload: an operator with a fixed shape, taken from a real network."""

    name: str
    op: str  # builder key: conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, dense, ...
    op_class: str  # one of OP_CLASSES
    network: str  # resnet18, resnet50, mobilenet_v2, bert_base
    args: dict[str, Any]  # the shape arguments the builder takes
    flops: int  # see the module docstring for the counting convention
    layer: str = ""  # where it sits in the network (informational)
    dtype: str = "float32"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra", None)
        return d


# --------------------------------------------------------------------------------------------
# FLOP formulas (pure Python; see the module docstring)
# --------------------------------------------------------------------------------------------

def _out_hw(h: int, w: int, k: int, s: int, pad: int) -> tuple[int, int]:
    return (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1


def _conv_flops(h: int, w: int, ci: int, co: int, k: int, s: int) -> int:
    oh, ow = _out_hw(h, w, k, s, k // 2)
    return 2 * oh * ow * co * ci * k * k


def _depthwise_flops(h: int, w: int, c: int, k: int, s: int) -> int:
    oh, ow = _out_hw(h, w, k, s, k // 2)
    return 2 * oh * ow * c * k * k


# --------------------------------------------------------------------------------------------
# Constructors
# --------------------------------------------------------------------------------------------

def _conv(net: str, layout: str, h: int, ci: int, co: int, k: int, s: int, layer: str) -> Workload:
    op = f"conv2d_{layout}"
    oc = "" if co == ci else f".o{co}"
    return Workload(
        name=f"{net}.{op}.{h}x{h}x{ci}{oc}.k{k}s{s}",
        op=op,
        op_class="conv2d",
        network=net,
        args=dict(H=h, W=h, CI=ci, CO=co, K=k, S=s, P=k // 2),
        flops=_conv_flops(h, h, ci, co, k, s),
        layer=layer,
    )


def _fused_conv(net: str, h: int, ci: int, co: int, k: int, s: int, act: str, layer: str) -> Workload:
    """conv2d (NCHW) + per-channel bias + ReLU/ReLU6: the fused group a BN-folded net runs."""
    op = f"conv2d_bias_{act}_nchw"
    oc = "" if co == ci else f".o{co}"
    oh, ow = _out_hw(h, h, k, s, k // 2)
    n_out = oh * ow * co
    act_flops = {"relu": 1, "relu6": 2}[act]
    return Workload(
        name=f"{net}.{op}.{h}x{h}x{ci}{oc}.k{k}s{s}",
        op=op,
        op_class="fused_conv2d",
        network=net,
        args=dict(H=h, W=h, CI=ci, CO=co, K=k, S=s, P=k // 2, act=act),
        flops=_conv_flops(h, h, ci, co, k, s) + n_out + act_flops * n_out,
        layer=layer,
    )


def _depthwise(net: str, h: int, c: int, k: int, s: int, layer: str) -> Workload:
    op = "depthwise_conv2d_nchw"
    return Workload(
        name=f"{net}.{op}.{h}x{h}x{c}.k{k}s{s}",
        op=op,
        op_class="depthwise_conv2d",
        network=net,
        args=dict(H=h, W=h, C=c, K=k, S=s, P=k // 2),
        flops=_depthwise_flops(h, h, c, k, s),
        layer=layer,
    )


def _dense(net: str, m: int, k: int, n: int, layer: str) -> Workload:
    return Workload(
        name=f"{net}.dense.{m}x{k}x{n}",
        op="dense",
        op_class="dense",
        network=net,
        args=dict(M=m, K=k, N=n),
        flops=2 * m * n * k,
        layer=layer,
    )


def _bmm(net: str, b: int, m: int, n: int, k: int, layer: str) -> Workload:
    return Workload(
        name=f"{net}.batch_matmul.{b}x{m}x{n}x{k}",
        op="batch_matmul",
        op_class="batch_matmul",
        network=net,
        args=dict(B=b, M=m, N=n, K=k),
        flops=2 * b * m * n * k,
        layer=layer,
    )


def _pool(net: str, kind: str, h: int, c: int, k: int, s: int, layer: str) -> Workload:
    op = f"{kind}_pool2d"
    pad = k // 2
    oh, ow = _out_hw(h, h, k, s, pad)
    window = oh * ow * c * k * k
    flops = window if kind == "max" else window + oh * ow * c
    return Workload(
        name=f"{net}.{op}.{h}x{h}x{c}.k{k}s{s}",
        op=op,
        op_class="pooling",
        network=net,
        args=dict(H=h, W=h, C=c, K=k, S=s, P=pad),
        flops=flops,
        layer=layer,
    )


def _global_pool(net: str, kind: str, h: int, c: int, layer: str) -> Workload:
    op = f"global_{kind}_pool2d"
    flops = h * h * c + (c if kind == "avg" else 0)
    return Workload(
        name=f"{net}.{op}.{h}x{h}x{c}",
        op=op,
        op_class="pooling",
        network=net,
        args=dict(H=h, W=h, C=c),
        flops=flops,
        layer=layer,
    )


def _per_element(net: str, op: str, op_class: str, shape: tuple[int, ...], flops_per_element: int,
                 layer: str) -> Workload:
    """A workload over one tensor of ``shape`` doing ``flops_per_element`` operations per element."""
    numel = 1
    for d in shape:
        numel *= d
    return Workload(
        name=f"{net}.{op}.{'x'.join(map(str, shape))}",
        op=op,
        op_class=op_class,
        network=net,
        args=dict(shape=list(shape)),
        flops=flops_per_element * numel,
        layer=layer,
    )


def _softmax(net: str, shape: tuple[int, ...], layer: str) -> Workload:
    return _per_element(net, "softmax", "softmax", shape, 4, layer)


def _add(net: str, shape: tuple[int, ...], layer: str) -> Workload:
    return _per_element(net, "add", "elementwise", shape, 1, layer)


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

R18, R50, MB2, BERT = "resnet18", "resnet50", "mobilenet_v2", "bert_base"

_ALL: list[Workload] = [
    # ResNet-18 (torchvision layout; BN folded into the conv bias)
    _fused_conv(R18, 224, 3, 64, 7, 2, "relu", "conv1"),
    _pool(R18, "max", 112, 64, 3, 2, "maxpool"),
    _conv(R18, "nchw", 56, 64, 64, 3, 1, "layer1.*.conv2"),
    _fused_conv(R18, 56, 64, 64, 3, 1, "relu", "layer1.*.conv1"),
    _fused_conv(R18, 56, 64, 128, 3, 2, "relu", "layer2.0.conv1"),
    _conv(R18, "nchw", 56, 64, 128, 1, 2, "layer2.0.downsample"),
    _conv(R18, "nchw", 28, 128, 128, 3, 1, "layer2.*.conv2"),
    _conv(R18, "nchw", 28, 128, 256, 1, 2, "layer3.0.downsample"),
    _conv(R18, "nchw", 14, 256, 256, 3, 1, "layer3.*.conv2"),
    _conv(R18, "nchw", 14, 256, 512, 1, 2, "layer4.0.downsample"),
    _conv(R18, "nchw", 7, 512, 512, 3, 1, "layer4.*.conv2"),
    _global_pool(R18, "avg", 7, 512, "avgpool"),
    _dense(R18, 1, 512, 1000, "fc"),
    # ResNet-50 (bottleneck 1x1 convs, NHWC as TVM's x86 NHWC path runs them)
    _conv(R50, "nhwc", 56, 64, 64, 3, 1, "layer1.*.conv2"),
    _conv(R50, "nhwc", 56, 256, 64, 1, 1, "layer1.*.conv1"),
    _conv(R50, "nhwc", 56, 64, 256, 1, 1, "layer1.*.conv3"),
    _conv(R50, "nchw", 14, 1024, 256, 1, 1, "layer3.*.conv1"),
    _conv(R50, "nchw", 7, 2048, 512, 1, 1, "layer4.*.conv1"),
    _fused_conv(R50, 7, 512, 2048, 1, 1, "relu", "layer4.*.conv3+add+relu (bias-relu part)"),
    _global_pool(R50, "avg", 7, 2048, "avgpool"),
    _dense(R50, 1, 2048, 1000, "fc"),
    # MobileNet-V2 (width 1.0)
    _fused_conv(MB2, 224, 3, 32, 3, 2, "relu6", "features.0"),
    _depthwise(MB2, 112, 32, 3, 1, "features.1.conv.0"),
    _conv(MB2, "nhwc", 112, 32, 16, 1, 1, "features.1.conv.1"),
    _fused_conv(MB2, 112, 16, 96, 1, 1, "relu6", "features.2.conv.0"),
    _depthwise(MB2, 112, 96, 3, 2, "features.2.conv.1"),
    _depthwise(MB2, 56, 144, 3, 1, "features.3.conv.1"),
    _conv(MB2, "nhwc", 56, 144, 24, 1, 1, "features.3.conv.2"),
    _fused_conv(MB2, 28, 32, 192, 1, 1, "relu6", "features.7.conv.0"),
    _depthwise(MB2, 28, 192, 3, 1, "features.5.conv.1"),
    _conv(MB2, "nhwc", 28, 192, 32, 1, 1, "features.5.conv.2"),
    _depthwise(MB2, 14, 384, 3, 1, "features.8.conv.1"),
    _conv(MB2, "nhwc", 14, 384, 64, 1, 1, "features.8.conv.2"),
    _depthwise(MB2, 7, 960, 3, 1, "features.15.conv.1"),
    _conv(MB2, "nchw", 7, 960, 160, 1, 1, "features.15.conv.2"),
    _fused_conv(MB2, 7, 320, 1280, 1, 1, "relu6", "features.18"),
    _dense(MB2, 1, 1280, 1000, "classifier.1"),
    # BERT-base, sequence length 128, 12 heads of 64
    _dense(BERT, 128, 768, 768, "attention.self.query/key/value, attention.output.dense"),
    _dense(BERT, 128, 768, 3072, "intermediate.dense"),
    _dense(BERT, 128, 3072, 768, "output.dense"),
    _bmm(BERT, 12, 128, 128, 64, "attention scores Q @ K^T"),
    _bmm(BERT, 12, 128, 64, 128, "attention context P @ V"),
    _softmax(BERT, (12, 128, 128), "attention probs"),
    _add(BERT, (128, 768), "residual add"),
]

WORKLOADS: dict[str, Workload] = {}
for _w in _ALL:
    if _w.name in WORKLOADS:  # pragma: no cover - guarded by the tests
        raise RuntimeError(f"duplicate workload name {_w.name}")
    if _w.op_class not in OP_CLASSES:  # pragma: no cover
        raise RuntimeError(f"unknown op class {_w.op_class}")
    WORKLOADS[_w.name] = _w

# The embedded sample: small-but-real operators that tune quickly on 2 cores, one or more per
# op class. Changing it changes what data/sample-cpu claims to be: regenerate it if you do.
SAMPLE = [
    "resnet18.dense.1x512x1000",
    "resnet18.conv2d_nchw.14x14x256.o512.k1s2",
    "resnet18.max_pool2d.112x112x64.k3s2",
    "resnet18.global_avg_pool2d.7x7x512",
    "mobilenet_v2.conv2d_bias_relu6_nchw.28x28x32.o192.k1s1",
    "mobilenet_v2.depthwise_conv2d_nchw.112x112x32.k3s1",
    "mobilenet_v2.depthwise_conv2d_nchw.14x14x384.k3s1",
    "mobilenet_v2.conv2d_nhwc.28x28x192.o32.k1s1",
    "mobilenet_v2.conv2d_bias_relu6_nchw.224x224x3.o32.k3s2",
    "mobilenet_v2.dense.1x1280x1000",
    "bert_base.batch_matmul.12x128x128x64",
    "bert_base.batch_matmul.12x128x64x128",
    "bert_base.softmax.12x128x128",
    "mobilenet_v2.conv2d_nhwc.112x112x32.o16.k1s1",
]

# Held out of the sample, for verifying models trained on it (same nets, other layers/ops).
HELDOUT = [
    "resnet50.dense.1x2048x1000",
    "resnet18.conv2d_nchw.56x56x64.o128.k1s2",
    "mobilenet_v2.depthwise_conv2d_nchw.28x28x192.k3s1",
    "mobilenet_v2.conv2d_nhwc.14x14x384.o64.k1s1",
    "mobilenet_v2.depthwise_conv2d_nchw.7x7x960.k3s1",
    "resnet50.global_avg_pool2d.7x7x2048",
]

WORKLOAD_SETS: dict[str, list[str]] = {
    "sample": SAMPLE,
    "heldout": HELDOUT,
    "resnet18": [w.name for w in _ALL if w.network == R18],
    "resnet50": [w.name for w in _ALL if w.network == R50],
    "mobilenet_v2": [w.name for w in _ALL if w.network == MB2],
    "bert": [w.name for w in _ALL if w.network == BERT],
    "all": [w.name for w in _ALL],
}
WORKLOAD_SETS["bert_base"] = WORKLOAD_SETS["bert"]

for _set, _names in WORKLOAD_SETS.items():
    for _n in _names:
        if _n not in WORKLOADS:  # pragma: no cover - guarded by the tests
            raise RuntimeError(f"set {_set!r} names unknown workload {_n!r}")


def list_sets() -> dict[str, list[str]]:
    """Named workload sets (copies)."""
    return {k: list(v) for k, v in WORKLOAD_SETS.items()}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; see tenset_curate.workloads.WORKLOADS") from None


def get_workloads(name_or_file: str | os.PathLike | Iterable[str]) -> list[Workload]:
    """Resolve a set name (``sample``, ``heldout``, ``resnet18``, ``mobilenet_v2``, ``bert``, ``all``),
    a single workload name, names separated by commas, a JSON file holding a list of workload names (or of objects
    with a ``name`` key, such as a collector's ``workloads.json``), or an iterable of names."""
    if not isinstance(name_or_file, (str, os.PathLike)):  # each once, in order (as a file's names are)
        return [get_workload(n) for n in dict.fromkeys(name_or_file)]
    key = os.fspath(name_or_file)
    if "," in key and not os.path.exists(key):  # names separated by commas (curate verify took them, collect did not)
        return get_workloads([k.strip() for k in key.split(",") if k.strip()])
    if key in WORKLOAD_SETS:
        return [WORKLOADS[n] for n in WORKLOAD_SETS[key]]
    if key in WORKLOADS:
        return [WORKLOADS[key]]
    if os.path.isfile(key):
        with open(key, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:  # the decoder's message named no file
                raise ValueError(f"{key}: not a JSON list of workload names ({e})") from None
        if isinstance(data, dict) and "workloads" in data:
            data = data["workloads"]
        if not isinstance(data, list):
            raise ValueError(f"{key}: expected a JSON list of workload names")
        names = [d["name"] if isinstance(d, dict) else d for d in data]
        out, seen = [], set()
        for n in names:
            if not isinstance(n, str):
                raise ValueError(f"{key}: workload names must be strings, got {n!r}")
            if n not in seen:
                seen.add(n)
                out.append(get_workload(n))
        return out
    raise KeyError(
        f"{key!r} is neither a workload set ({', '.join(sorted(WORKLOAD_SETS))}), "
        "a workload name, nor an existing JSON file"
    )


# --------------------------------------------------------------------------------------------
# TVM side (lazy imports only)
# --------------------------------------------------------------------------------------------

def _tensors(w: Workload) -> list:
    """te tensors [inputs..., output] for the workload."""
    from tvm import te, topi  # noqa: PLC0415 - keep `import tenset_curate.workloads` tvm-free

    a, dt = w.args, w.dtype
    if w.op == "conv2d_nchw":
        x = te.placeholder((1, a["CI"], a["H"], a["W"]), dt, name="data")
        k = te.placeholder((a["CO"], a["CI"], a["K"], a["K"]), dt, name="kernel")
        return [x, k, topi.nn.conv2d_nchw(x, k, a["S"], a["P"], 1, out_dtype=dt)]
    if w.op == "conv2d_nhwc":
        x = te.placeholder((1, a["H"], a["W"], a["CI"]), dt, name="data")
        k = te.placeholder((a["K"], a["K"], a["CI"], a["CO"]), dt, name="kernel")  # HWIO
        return [x, k, topi.nn.conv2d_nhwc(x, k, a["S"], a["P"], 1, out_dtype=dt)]
    if w.op.startswith("conv2d_bias_"):
        x = te.placeholder((1, a["CI"], a["H"], a["W"]), dt, name="data")
        k = te.placeholder((a["CO"], a["CI"], a["K"], a["K"]), dt, name="kernel")
        b = te.placeholder((1, a["CO"], 1, 1), dt, name="bias")
        y = topi.add(topi.nn.conv2d_nchw(x, k, a["S"], a["P"], 1, out_dtype=dt), b)
        y = topi.nn.relu(y) if a["act"] == "relu" else topi.clip(y, 0.0, 6.0)
        return [x, k, b, y]
    if w.op == "depthwise_conv2d_nchw":
        x = te.placeholder((1, a["C"], a["H"], a["W"]), dt, name="data")
        k = te.placeholder((a["C"], 1, a["K"], a["K"]), dt, name="kernel")
        return [x, k, topi.nn.depthwise_conv2d_nchw(x, k, a["S"], a["P"], 1, out_dtype=dt)]
    if w.op == "dense":
        x = te.placeholder((a["M"], a["K"]), dt, name="data")
        k = te.placeholder((a["N"], a["K"]), dt, name="weight")
        return [x, k, topi.nn.dense(x, k, out_dtype=dt)]
    if w.op == "batch_matmul":
        x = te.placeholder((a["B"], a["M"], a["K"]), dt, name="a")
        y = te.placeholder((a["B"], a["N"], a["K"]), dt, name="b")
        return [x, y, topi.nn.batch_matmul(x, y, out_dtype=dt, transpose_a=False, transpose_b=True)]
    if w.op in ("max_pool2d", "avg_pool2d"):
        x = te.placeholder((1, a["C"], a["H"], a["W"]), dt, name="data")
        p = a["P"]
        y = topi.nn.pool2d(
            x, (a["K"], a["K"]), (a["S"], a["S"]), (1, 1), (p, p, p, p), w.op[:3],
            ceil_mode=False, layout="NCHW", count_include_pad=True,
        )
        return [x, y]
    if w.op in ("global_avg_pool2d", "global_max_pool2d"):
        x = te.placeholder((1, a["C"], a["H"], a["W"]), dt, name="data")
        return [x, topi.nn.global_pool(x, w.op.split("_")[1], layout="NCHW")]
    if w.op == "softmax":
        x = te.placeholder(tuple(a["shape"]), dt, name="data")
        return [x, topi.nn.softmax(x, axis=-1)]
    if w.op == "add":
        x = te.placeholder(tuple(a["shape"]), dt, name="lhs")
        y = te.placeholder(tuple(a["shape"]), dt, name="rhs")
        return [x, y, topi.add(x, y)]
    raise ValueError(f"no builder for op {w.op!r}")


def build_prim_func(workload: Workload | str):
    """The workload as a TVM ``IRModule`` with one PrimFunc, ``main`` (imports TVM)."""
    import tvm  # noqa: PLC0415
    from tvm import te  # noqa: PLC0415

    w = get_workload(workload) if isinstance(workload, str) else workload
    func = te.create_prim_func(_tensors(w)).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})


def estimate_flops_tvm(workload: Workload | str) -> float:
    """TVM's own FLOP estimate for the workload's PrimFunc (imports TVM)."""
    from tvm.s_tir.analysis import estimate_tir_flops  # noqa: PLC0415

    return float(estimate_tir_flops(build_prim_func(workload)))
