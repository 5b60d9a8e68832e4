"""Vectorised typing of Ansor schedule steps: compact JSON texts -> ``list<STEP_TYPE>`` Arrow array.

``steps_from_json(blobs)`` takes one JSON text per record, exactly as ``orjson.dumps(record["i"][1][1])`` writes it
(``[["SP",3,0,128,[2,4,1,16],1],["PR",5,0,"auto_unroll_max_step$1024"],...]``), and returns the typed steps plus
``{record_index: reason}`` for records whose steps are malformed (those get an empty list). The result is
identical (``ListArray.equals``) to the pure-Python reference ``readers.steps_from_json_reference``.

How (no per-step Python loop on the fast path; the work runs in ~512 KB chunks of records so that every numpy
array stays in cache):

1. the texts are joined into one ``uint8`` buffer; the positions of ``"``, ``[``, ``]``, ``,`` (and ``\\``)
   become the token array; a record holding a backslash, a byte outside printable ASCII, or a string with a
   structural character in it goes to the slow path, so every string is two adjacent quote tokens;
2. the depth (cumulative sum of brackets) classifies every ``[`` (1 = record, 2 = step, 3 = int list) and every
   value; a grammar check over consecutive token pairs (and whether the bytes between them are empty) validates
   the JSON; the numbers are the non-empty gaps after ``[`` or ``,``;
3. one- and two-digit numbers (nearly all of them) are read from a per-byte table built with a few ``uint8``
   operations over the buffer; longer or signed ones are parsed as a small digits matrix (int64 range checked);
4. per-step counts (ints, int lists, strings) and per-list counts come from one cumulative sum of a packed
   4 x 16-bit counter word; strings are gathered from the buffer; the Arrow arrays are built from the numpy
   offsets and values;
5. each step's layout (its number of arguments and where its lists and strings sit among them, read off the same
   running count) is compared with the one TVM's reader takes for its kind (``readers.ANSOR_STEP_ARGS``); a record
   with a step of an unknown kind or another layout goes to the slow path, which quarantines it with the reason.

Anything the fast path does not handle exactly (backslash escapes, floats/exponents, ``true``/``false``/``null``,
objects, whitespace, non-ASCII text, integers beyond int64, strings holding ``[``/``]``/``,``, malformed step
shapes, records of >= 65000 tokens; and whole batches of fewer than 8 records) is routed per record to the slow
path: ``orjson.loads`` + the reference's Python logic, so the result and the reason strings are the reference's.
An integer outside int64 (orjson reads up to 2**64-1) makes the record malformed on both paths ("integer ... out of
int64 range").
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .schema import STEP_TYPE

__all__ = ["steps_from_json", "steps_from_json_slow", "STEPS_TYPE"]

STEPS_TYPE = pa.list_(STEP_TYPE)

_PAD = b"\x00" * 16
_CHUNK_BYTES = 1 << 26  # input bytes per internal chunk (keeps int32 positions safe and memory bounded)
_MAX_RECORD_TOKENS = 65000  # per-step counters are packed in 16-bit fields
_MIN_FAST_RECORDS = 8  # smaller batches go to the slow path directly
_CACHE_BYTES = 1 << 19  # JSON bytes per inner chunk, so the token arrays stay in cache

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

# token codes: C & 7 for '"' (2), '[' (3), ',' (4), ']' (5); a closing quote is recoded to 6
_OQ, _OPEN, _COMMA, _CLOSE, _CQ = 2, 3, 4, 5, 6

_U = np.uint64

_FIELD = np.int64(0xFFFF)


# --------------------------------------------------------------------------------------------------------------
# Public API


def steps_from_json(blobs: list[bytes]) -> tuple[pa.ListArray, dict[int, str]]:
    """Type the steps of many records at once: one compact JSON text per record.

    Returns (``list<STEP_TYPE>`` array with one entry per input, {record index: reason} for malformed records,
    whose entry is an empty list).
    """
    blobs = blobs if isinstance(blobs, list) else list(blobs)
    n = len(blobs)
    if n == 0:
        return pa.array([], STEPS_TYPE), {}
    if n < _MIN_FAST_RECORDS:  # the fast path's fixed cost (a few hundred numpy calls) would dominate
        return steps_from_json_slow(blobs)
    lens = np.fromiter(map(len, blobs), dtype=np.int64, count=n)
    if int(lens.sum()) <= _CHUNK_BYTES:
        return _convert(blobs, lens)
    # split into chunks of about _CHUNK_BYTES
    cum = np.cumsum(lens)
    cuts = [0]
    while cuts[-1] < n:
        base = int(cum[cuts[-1] - 1]) if cuts[-1] else 0
        j = int(np.searchsorted(cum, base + _CHUNK_BYTES, side="right"))
        cuts.append(max(j, cuts[-1] + 1))
    parts, bad = [], {}
    for a, b in zip(cuts[:-1], cuts[1:]):
        arr, bd = _convert(blobs[a:b], lens[a:b])
        parts.append(arr)
        for k, v in bd.items():
            bad[a + k] = v
    return pa.concat_arrays(parts), bad


def steps_from_json_slow(blobs: list[bytes]) -> tuple[pa.ListArray, dict[int, str]]:
    """The slow path on every record: the readers' pure-Python reference (orjson.loads + ``add_ansor_steps``)."""
    from .readers import steps_from_json_reference

    return steps_from_json_reference(blobs)


# --------------------------------------------------------------------------------------------------------------
# Fast path


def _records_of(off: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Record index of each byte position (``off`` = record start offsets, n + 1 of them)."""
    return np.searchsorted(off, pos, side="right") - 1


def _convert(blobs: list[bytes], lens: np.ndarray) -> tuple[pa.ListArray, dict[int, str]]:
    n = len(blobs)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    total = int(off[-1])
    buf = np.frombuffer(b"".join([*blobs, _PAD]), dtype=np.uint8)

    # a record must be at least "[]": starts with '[' and ends with ']'
    slow = lens < 2
    slow |= buf[off[:-1]] != 91
    slow |= buf[np.maximum(off[1:] - 1, 0)] != 93

    # work in cache-sized chunks of records
    cuts = np.unique(np.concatenate(([0], np.searchsorted(off, np.arange(_CACHE_BYTES, total, _CACHE_BYTES)), [n])))
    outs = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        o0 = int(off[a])
        outs.append(_fast_chunk(buf[o0:int(off[b]) + 16], off[a:b + 1] - o0, slow[a:b]))

    fast = _assemble(outs, n)
    nargs = _cat([o["n_ints"] + o["n_lists"] + o["n_strs"] for o in outs])
    slow |= _of_bad_steps(fast, _cat([o["sig"] for o in outs]), nargs, n)  # the reference says why
    if not slow.any():
        return fast, {}
    # slow records: the reference's Python logic, merged back in record order
    slow_idx = np.flatnonzero(slow)
    slow_arr, slow_bad = steps_from_json_slow([blobs[i] for i in slow_idx.tolist()])
    bad = {int(slow_idx[k]): v for k, v in slow_bad.items()}
    perm = np.arange(n, dtype=np.int64)
    perm[slow_idx] = n + np.arange(len(slow_idx))
    merged = pa.concat_arrays([fast, slow_arr]).take(pa.array(perm))
    return merged, bad


def _of_bad_steps(arr: pa.ListArray, sig: np.ndarray, nargs: np.ndarray, n: int) -> np.ndarray:
    """Per record: whether one of its steps has a kind TVM does not write, or arguments other than the ones TVM's
    reader takes for its kind (``readers.ANSOR_STEP_ARGS``; ``sig`` and ``nargs``: each step's layout as
    ``signature_code`` numbers it)."""
    import pyarrow.compute as pc

    from .readers import ANSOR_STEP_SIGNATURES

    out = np.zeros(n, dtype=bool)
    known = sorted(ANSOR_STEP_SIGNATURES)
    codes = [signature_code(ANSOR_STEP_SIGNATURES[k]) for k in known] + [(-1, -1)]  # the last: an unknown kind
    want_sig, want_n = (np.array(c, dtype=np.int64) for c in zip(*codes))
    idx = pc.index_in(pc.list_flatten(arr).field("kind"), value_set=pa.array(known)).fill_null(len(known))
    idx = idx.to_numpy(zero_copy_only=False)
    bad = want_sig.take(idx) != sig
    bad |= want_n.take(idx) != nargs
    if bad.any():
        out[pc.list_parent_indices(arr).to_numpy()[bad]] = True
    return out


def _fast_chunk(cb: np.ndarray, coff: np.ndarray, slow: np.ndarray) -> dict:
    """Type the records of one chunk. ``cb``: its bytes (+16 readable bytes after), ``coff``: record offsets in
    ``cb``; ``slow`` (a view, updated in place) flags the records left to the slow path (they get no steps here)."""
    nb = int(coff[-1])
    body = cb[:nb]
    odd = np.subtract(body, 32, dtype=np.uint8) >= 95  # control bytes, DEL, non-ASCII
    odd |= body == 92  # backslash: an escape inside a string
    if odd.any():
        slow[np.unique(_records_of(coff, np.flatnonzero(odd)))] = True
    m = np.subtract(body, 91, dtype=np.uint8) <= 2  # [ \ ]
    m |= body == 34
    m |= body == 44
    P = np.flatnonzero(m)
    C = body.take(P)
    V = _small_ints(body)
    for _round in range(64):
        if slow.any():
            rt = np.searchsorted(P, coff)
            keep = np.repeat(~slow, np.diff(rt))
            P, C = np.compress(keep, P), np.compress(keep, C)
        res = _analyze(cb, coff, P, C, V)
        if isinstance(res, dict):
            return res
        slow |= res
    slow[:] = True  # pragma: no cover - pathological: give the whole chunk to the slow path
    return _analyze(cb, coff, P[:0], C[:0], V)


def _small_ints(body: np.ndarray) -> np.ndarray:
    """Per byte i: the value (0..99) of a one- or two-digit JSON integer that ends at i and starts right after a
    ',' or '[', else 255 (longer, signed or not an integer: those are parsed the long way)."""
    nb = len(body)
    V = np.full(nb, 255, dtype=np.uint8)
    if nb < 3:
        return V
    dig = body - np.uint8(48)
    isd = (dig[2:] <= 9).view(np.uint8)
    sep = body == 44
    sep |= body == 91
    d0, d1 = dig[1:-1], dig[2:]
    two = sep[:-2] & (np.subtract(d0, 1, dtype=np.uint8) <= 8)  # ",12": first digit 1..9
    # V = 255 + isd * (one * (d1 + 1) + two * (10 * d0 + d1 + 1))   (mod 256; "one" and "two" exclude each other)
    v = d1 + np.uint8(1)
    acc = sep[1:-1].view(np.uint8) * v  # ",5"
    v += d0 * np.uint8(10)
    v *= two.view(np.uint8)
    acc += v
    acc *= isd
    np.add(acc, np.uint8(255), out=V[2:])
    if dig[1] <= 9 and sep[0]:
        V[1] = dig[1]
    return V


def _flag(coff: np.ndarray, P: np.ndarray, tok_idx: np.ndarray) -> np.ndarray:
    f = np.zeros(len(coff) - 1, dtype=bool)
    f[_records_of(coff, P.take(tok_idx))] = True
    return f


_E64 = np.zeros(0, np.int64)
_E8 = np.zeros(0, np.uint8)


def _analyze(cb: np.ndarray, coff: np.ndarray, P: np.ndarray, C: np.ndarray, V: np.ndarray):
    """Validate and classify the tokens of a chunk's fast records.

    Returns a bool array of newly flagged records, or the chunk's typed pieces (a dict)."""
    n = len(coff) - 1
    ntok = len(P)
    rt = np.searchsorted(P, coff)  # record r owns tokens rt[r]:rt[r+1]
    if ntok == 0:
        return dict(sig=_E64, spr=np.zeros(n, np.int64), n_ints=_E64, n_lists=_E64, n_strs=_E64, n_inn=_E64,
                    ints=_E64, inn=_E64, kind_chars=_E8, kind_len=_E64, str_chars=_E8, str_len=_E64)

    # over-long records -> slow path (backslashes never get here)
    ntr = np.diff(rt)
    if ntr.max() >= _MAX_RECORD_TOKENS:
        return ntr >= _MAX_RECORD_TOKENS

    # strings: quotes must come as adjacent token pairs (no structural character inside a string)
    qi = np.flatnonzero(C == 34)
    oq, cq = qi[0::2], qi[1::2]
    if len(qi) & 1 or not np.array_equal(cq, oq + 1):
        qc = np.diff(np.searchsorted(qi, rt)) & 1
        if qc.any():
            return qc.astype(bool)
        return _flag(coff, P, oq[cq != oq + 1])

    # depth after each token
    isO = C == 91
    isC = C == 93
    d = np.cumsum(isO.view(np.int8) - isC.view(np.int8), dtype=np.int32)
    if d.take(rt[1:] - 1).any():  # some record ends at depth != 0: flag the unbalanced ones
        last = rt[1:] - 1
        base = rt[:-1] - 1
        return d.take(np.maximum(last, 0)) * (last >= 0) != d.take(np.maximum(base, 0)) * (base >= 0)
    if np.count_nonzero(d <= 0) != np.count_nonzero(ntr):  # only a record's final ']' closes at depth 0
        return _flag(coff, P, np.flatnonzero((d <= 0) & ~isC))
    if d.max() > 3:  # lists nested deeper than step -> int list
        return _flag(coff, P, np.flatnonzero(d > 3))

    # grammar over consecutive token pairs (code, next code, non-empty gap between them)
    c = C & np.uint8(7)
    c[cq] = _CQ
    dP = np.diff(P)
    gap = dP > 1
    cp, cn = c[:-1], c[1:]
    next_end = np.subtract(cn, _COMMA, dtype=np.uint8) <= 1  # ',' or ']'
    prev_sep = np.subtract(cp, _OPEN, dtype=np.uint8) <= 1  # '[' or ','
    # after '[' or ',': a value opens with no gap, or a number fills the gap before ',' / ']'; "[]" too
    ok_sep = gap == next_end
    ok_sep |= (cp == _OPEN) & (cn == _CLOSE)
    # after ']' or a closing quote: ',' or ']' with no gap; after an opening quote: its closing quote
    ok = next_end & ~gap
    ok |= cp == _OQ
    ok &= ~prev_sep
    ok |= prev_sep & ok_sep
    nbd = rt[1:-1] - 1  # record boundary pairs (']' then the next record's '[')
    ok[nbd[(nbd >= 0) & (nbd < ntok - 1)]] = True
    if not ok.all():
        return _flag(coff, P, np.flatnonzero(~ok))

    # structure: '[' at depth 2 = step, depth 3 = int list; strings only at depth 2; a step starts with a string
    Oi = np.flatnonzero(isO)
    dO = d.take(Oi)
    SS = np.compress(dO == 2, Oi)
    IL = np.compress(dO == 3, Oi)
    dq = d.take(oq)
    if (dq != 2).any():
        return _flag(coff, P, oq[dq != 2])
    if len(SS):
        nq = C.take(SS + 1) != 34
        if nq.any():
            return _flag(coff, P, SS[nq])
    kfirst = c.take(oq - 1) == _OPEN
    kq = np.compress(kfirst, oq)  # kind strings
    sq = np.compress(~kfirst, oq)  # other strings

    # numbers: a non-empty gap after '[' or ','; depth 2 = a step's ints, depth 3 = an int list's values
    isnum = gap & (cp != _OQ)
    dd = d[:-1]
    k2 = np.flatnonzero(isnum & (dd == 2))
    k3 = np.flatnonzero(isnum & (dd == 3))
    if len(k2) + len(k3) != np.count_nonzero(isnum):  # a number directly in the record's list
        return _flag(coff, P, np.flatnonzero(isnum & (dd < 2)))
    ints, bad = _numbers(cb, P, dP, V, k2)
    if bad is not None:
        return _flag(coff, P, bad)
    inn, bad = _numbers(cb, P, dP, V, k3)
    if bad is not None:
        return _flag(coff, P, bad)

    # packed per-token counters: inner values | step ints | int lists | strings (16 bits each)
    code = np.zeros(ntok, dtype=np.int64)
    code[k3] = 1
    code[k2] = 1 << 16
    code[IL] += 1 << 32  # the '[' token also carries its first value
    code[sq] = 1 << 48
    cnt = np.cumsum(code)
    cs = _interval_sums(cnt, SS)
    Pk = P.take(kq)
    kind_chars, kind_len = _gather_strings(cb, Pk + 1, P.take(kq + 1) - Pk - 1)
    Ps = P.take(sq)
    str_chars, str_len = _gather_strings(cb, Ps + 1, P.take(sq + 1) - Ps - 1)
    return dict(
        sig=_signatures(SS, IL, sq, cnt),
        spr=np.diff(np.searchsorted(SS, rt)),
        n_ints=(cs >> 16) & _FIELD,
        n_lists=(cs >> 32) & _FIELD,
        n_strs=(cs >> 48) & _FIELD,
        n_inn=_interval_sums(cnt, IL) & _FIELD,
        ints=ints,
        inn=inn,
        kind_chars=kind_chars,
        kind_len=kind_len,
        str_chars=str_chars,
        str_len=str_len,
    )


_SIG_CODE = {"L": 2, "s": 3}  # integers are the arguments neither code marks
_SIG_MAX_ARGS = 12  # later arguments all count as the 12th (no step of TVM's takes more than 5)


def signature_code(sig: str) -> tuple[int, int]:
    """``readers.ANSOR_STEP_SIGNATURES``' letters as ``_signatures`` numbers a step: (the sum of code * 4**index
    over its lists and strings, its number of arguments)."""
    return sum(_SIG_CODE[c] << (2 * min(i, _SIG_MAX_ARGS)) for i, c in enumerate(sig) if c != "i"), len(sig)


def _signatures(SS: np.ndarray, IL: np.ndarray, sq: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Per step (its '[' token in ``SS``): the first half of ``signature_code``, from where its int lists (``IL``)
    and strings other than the kind (``sq``) sit among its values; ``cnt`` is the packed running count of
    ``_analyze`` (step ints, int lists and strings in bits 16, 32 and 48), so a value's index is the count of
    values since its step began."""
    if len(SS) == 0:
        return _E64
    at = np.concatenate((IL, sq))
    step = np.searchsorted(SS, at, side="right") - 1
    d = cnt.take(at - 1) - cnt.take(SS).take(step)  # the step's values before it
    arg = ((d >> 16) & _FIELD) + ((d >> 32) & _FIELD) + ((d >> 48) & _FIELD)
    np.minimum(arg, _SIG_MAX_ARGS, out=arg)
    code = np.full(len(at), 2, dtype=np.int64)
    code[len(IL):] = 3
    return np.bincount(step, weights=code << (2 * arg), minlength=len(SS)).astype(np.int64)


def _numbers(cb, P, dP, V, k):
    """Values of the numbers in the gaps after tokens ``k``: (int64 values, None) or (_, tokens of bad ones)."""
    vals = V.take(P.take(k + 1) - 1).astype(np.int64)
    longer = vals == 255  # one- and two-digit numbers (nearly all) come from the per-byte table
    if longer.any():
        li = np.flatnonzero(longer)
        lk = k.take(li)
        lv, lb = _parse_long(cb, P.take(lk) + 1, dP.take(lk) - 1)
        if lb.any():
            return vals, lk[lb]
        np.put(vals, li, lv)
    return vals, None


def _interval_sums(cnt: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Packed counter sums over tokens [starts[i], starts[i+1]) (the last one to the end)."""
    if not len(starts):
        return _E64
    before = np.empty(len(starts) + 1, dtype=np.int64)
    before[:-1] = cnt.take(starts - 1)  # starts >= 1: a step or int list never opens the token stream
    before[-1] = cnt[-1]
    return np.diff(before)


_POW10 = np.array([10**k for k in range(20)] + [0], dtype=np.uint64)  # _POW10[-1] = 0 masks positions past the end


def _parse_long(cb: np.ndarray, s: np.ndarray, L: np.ndarray):
    """Parse the (few) JSON integers cb[s:s+L] that are not one or two digits: one row of digits per number.

    Returns (int64 values, bad mask): bad = not a JSON integer, or beyond int64."""
    neg = cb.take(s) == 45
    s = s + neg
    L = L - neg
    bad = (L < 1) | (L > 19)
    bad |= (cb.take(s) == 48) & (L > 1)  # a leading zero
    L = np.clip(L, 0, 19)
    w = int(L.max()) if len(L) else 0
    j = np.arange(w)
    idx = s[:, None] + j
    np.minimum(idx, len(cb) - 1, out=idx)
    dig = cb.take(idx) - np.uint8(48)
    e = L[:, None] - 1 - j  # power of ten of each position; negative past the end
    bad |= ((dig > 9) & (e >= 0)).any(axis=1)
    np.maximum(e, -1, out=e)
    v = (dig.astype(np.uint64) * _POW10.take(e)).sum(axis=1, dtype=np.uint64)  # <= 19 digits < 2**64
    bad |= v > _U(_I64_MAX) + neg.astype(np.uint64)  # -2**63 is fine
    out = v.view(np.int64)
    np.negative(out, out=out, where=neg)
    return out, bad


def _gather_strings(cb: np.ndarray, start: np.ndarray, length: np.ndarray):
    tot = int(length.sum())
    if not tot:
        return _E8, length
    ends = np.cumsum(length)
    idx = np.arange(tot, dtype=np.int64)
    idx += np.repeat(start - (ends - length), length)
    return cb.take(idx), length


def _offsets(parts: list) -> pa.Array:
    counts = np.concatenate(parts) if len(parts) != 1 else parts[0]
    o = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=o[1:])
    return pa.array(o)


def _cat(parts: list) -> np.ndarray:
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def _strings(chars: list, lens: list) -> pa.StringArray:
    ln = _cat(lens)
    o = np.zeros(len(ln) + 1, dtype=np.int32)
    np.cumsum(ln, out=o[1:])
    return pa.StringArray.from_buffers(len(ln), pa.py_buffer(o), pa.py_buffer(_cat(chars)))


def _assemble(outs: list, n: int) -> pa.ListArray:
    g = {k: [o[k] for o in outs] for k in outs[0]}
    step_off = _offsets(g["spr"])
    nsteps = step_off[-1].as_py()
    kinds = _strings(g["kind_chars"], g["kind_len"])
    ints = pa.ListArray.from_arrays(_offsets(g["n_ints"]), pa.array(_cat(g["ints"])))
    inner = pa.ListArray.from_arrays(_offsets(g["n_inn"]), pa.array(_cat(g["inn"])))
    lists = pa.ListArray.from_arrays(_offsets(g["n_lists"]), inner)
    strl = pa.ListArray.from_arrays(_offsets(g["n_strs"]), _strings(g["str_chars"], g["str_len"]))
    floats = pa.ListArray.from_arrays(pa.array(np.zeros(nsteps + 1, np.int32)), pa.array([], pa.float64()))
    struct = pa.StructArray.from_arrays([kinds, ints, lists, strl, floats], fields=list(STEP_TYPE))
    return pa.ListArray.from_arrays(step_off, struct)
