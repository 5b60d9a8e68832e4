/* Compiled fast path of the Ansor/TenSet log reader (readers.read_ansor).

   scan(data, first_line, strip_bom) takes a block of whole lines of one log and returns, for every line it can
   convert exactly as the pure-Python reader would, the record's columns as packed arrays; every other line
   (anything unusual: \u escapes, non-ASCII bytes, integers beyond int64, floats out of the plain range, duplicate
   keys, malformed steps, invalid JSON, ...) is handed back as a (line number, start, end) triple for the Python
   path, which gives the reference result and the reference quarantine reason. The fast path never guesses: when
   in doubt a line is slow.

   Per line: a strict JSON parser builds a small tape of nodes (preorder; containers know their child count and the
   index after their subtree), then the record is read off the tape with the same checks as
   readers._add_ansor_record, summarize_costs and _Columns.add_ansor_steps. The record id is blake2b-64 of the raw
   line (hashlib.blake2b(raw, digest_size=8).hexdigest()); the mean cost is math.fsum's correctly rounded sum
   (CPython's algorithm) divided by the count and rounded to float32. Strings that repeat across records (version,
   target, workload key) are interned: rows carry int32 ids into a list of unique strings.

   Memory: every output grows in a checked buffer; a failed allocation raises MemoryError. Offsets are int32, so
   the caller passes blocks of at most 256 MB. No input byte is read outside [data, data + len).

   ms_trace (further down) is the MetaSchedule reader's trace walk, over the objects orjson parsed: the same rule,
   it appends what _Columns._add_ms_trace_py would or hands the trace back. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <float.h>

/* ------------------------------------------------------------------------------------------------ buffers */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    size_t need = b->n + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
    char *p = (char *)realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t len) {
    if (b->n + len > b->cap && buf_grow(b, len)) return -1;
    memcpy(b->p + b->n, src, len);
    b->n += len;
    return 0;
}

#define PUT(b, T, val)                                                        \
    do {                                                                      \
        Buf *b_ = (b);                                                        \
        T tmp_ = (T)(val);                                                    \
        if (b_->n + sizeof(T) > b_->cap && buf_grow(b_, sizeof(T))) goto nomem; \
        memcpy(b_->p + b_->n, &tmp_, sizeof(T));                              \
        b_->n += sizeof(T);                                                   \
    } while (0)

/* ------------------------------------------------------------------------------------------------ blake2b */

static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
#endif
}

#define B2G(a, b, c, d, x, y)         \
    do {                              \
        a = a + b + (x);              \
        d = rotr64(d ^ a, 32);        \
        c = c + d;                    \
        b = rotr64(b ^ c, 24);        \
        a = a + b + (y);              \
        d = rotr64(d ^ a, 16);        \
        c = c + d;                    \
        b = rotr64(b ^ c, 63);        \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t *block, uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= t;
    if (last) v[14] = ~v[14];
#define B2ROUND(r)                                                      \
    do {                                                                \
        B2G(v[0], v[4], v[8], v[12], m[B2_SIGMA[r][0]], m[B2_SIGMA[r][1]]);   \
        B2G(v[1], v[5], v[9], v[13], m[B2_SIGMA[r][2]], m[B2_SIGMA[r][3]]);   \
        B2G(v[2], v[6], v[10], v[14], m[B2_SIGMA[r][4]], m[B2_SIGMA[r][5]]);  \
        B2G(v[3], v[7], v[11], v[15], m[B2_SIGMA[r][6]], m[B2_SIGMA[r][7]]);  \
        B2G(v[0], v[5], v[10], v[15], m[B2_SIGMA[r][8]], m[B2_SIGMA[r][9]]);  \
        B2G(v[1], v[6], v[11], v[12], m[B2_SIGMA[r][10]], m[B2_SIGMA[r][11]]); \
        B2G(v[2], v[7], v[8], v[13], m[B2_SIGMA[r][12]], m[B2_SIGMA[r][13]]);  \
        B2G(v[3], v[4], v[9], v[14], m[B2_SIGMA[r][14]], m[B2_SIGMA[r][15]]);  \
    } while (0)
    /* rounds unrolled so that every message index is a compile-time constant */
    B2ROUND(0); B2ROUND(1); B2ROUND(2); B2ROUND(3); B2ROUND(4); B2ROUND(5);
    B2ROUND(6); B2ROUND(7); B2ROUND(8); B2ROUND(9); B2ROUND(10); B2ROUND(11);
#undef B2ROUND
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* hashlib.blake2b(data, digest_size=8).hexdigest() into out[16] */
static void blake2b64_hex(const uint8_t *data, size_t len, char out[16]) {
    uint64_t h[8];
    memcpy(h, B2_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8ULL; /* no key, 8-byte digest */
    uint64_t t = 0;
    while (len > 128) {
        t += 128;
        b2_compress(h, data, t, 0);
        data += 128;
        len -= 128;
    }
    uint8_t last[128];
    memset(last, 0, sizeof last);
    if (len) memcpy(last, data, len);
    t += len;
    b2_compress(h, last, t, 1);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++) {
        uint8_t byte = (uint8_t)(h[0] >> (8 * i));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
}

/* ------------------------------------------------------------------------------------------------ fsum */

/* math.fsum (CPython 3.11 Modules/mathmodule.c, finite inputs): the correctly rounded sum. 0 on success, -1 when
   the partials would overflow the fixed array (never for finite doubles; kept as a guard). */
static int fsum_finite(const double *x, size_t n, double *out) {
    double p[128];
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        double xv = x[k], y, t, hi, yr, lo;
        size_t i = 0;
        for (size_t j = 0; j < m; j++) {
            y = p[j];
            if (fabs(xv) < fabs(y)) {
                t = xv;
                xv = y;
                y = t;
            }
            hi = xv + y;
            yr = hi - xv;
            lo = y - yr;
            if (lo != 0.0) p[i++] = lo;
            xv = hi;
        }
        m = i;
        if (xv != 0.0) {
            if (m >= 128) return -1;
            p[m++] = xv;
        }
    }
    double hi = 0.0;
    if (m > 0) {
        double xv, y, yr, lo = 0.0;
        hi = p[--m];
        while (m > 0) {
            xv = hi;
            y = p[--m];
            hi = xv + y;
            yr = hi - xv;
            lo = y - yr;
            if (lo != 0.0) break;
        }
        if (m > 0 && ((lo < 0.0 && p[m - 1] < 0.0) || (lo > 0.0 && p[m - 1] > 0.0))) {
            y = lo * 2.0;
            xv = hi + y;
            yr = xv - hi;
            if (y == yr) hi = xv;
        }
    }
    *out = hi;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ JSON tape */

enum { T_OBJ = 1, T_ARR, T_STR, T_INT, T_FLT, T_TRUE, T_FALSE, T_NULL };

typedef struct {
    uint8_t type;
    uint8_t esc;  /* string holds backslash escapes */
    uint32_t n;   /* container: children (object: pairs) */
    uint32_t next; /* index of the first node after this subtree */
    uint32_t s, e; /* string: content span in the line */
    union {
        int64_t i;
        double d;
    } v;
} Node;

typedef struct {
    const uint8_t *b;
    size_t pos, len;
    Node *nodes;
    uint32_t nn, cap;
} Parser;

#define MAX_DEPTH 64
#define MAX_BLOCK_BYTES ((size_t)1 << 28) /* int32 offsets; exported as MAX_BLOCK_BYTES */
#define SLOW 1
#define NOMEM (-1)

static uint8_t STR_PLAIN[256]; /* printable ASCII other than '"' and '\\' */
static uint8_t WS[256];        /* JSON whitespace */
static uint8_t STRIP_WS[256];  /* bytes.strip()'s whitespace */

static void init_tables(void) {
    for (int c = 0x20; c < 0x7f; c++) STR_PLAIN[c] = 1;
    STR_PLAIN['"'] = STR_PLAIN['\\'] = 0;
    WS[' '] = WS['\t'] = WS['\n'] = WS['\r'] = 1;
    STRIP_WS[' '] = STRIP_WS['\t'] = STRIP_WS['\n'] = STRIP_WS['\r'] = STRIP_WS['\x0b'] = STRIP_WS['\x0c'] = 1;
}

static int new_node(Parser *p, uint8_t type, uint32_t *idx) {
    if (p->nn == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 1024;
        if (cap > (1u << 28)) return SLOW;
        Node *nodes = (Node *)realloc(p->nodes, (size_t)cap * sizeof(Node));
        if (!nodes) return NOMEM;
        p->nodes = nodes;
        p->cap = cap;
    }
    *idx = p->nn++;
    Node *nd = &p->nodes[*idx];
    nd->type = type;
    nd->esc = 0;
    nd->n = 0;
    nd->next = 0;
    nd->s = nd->e = 0;
    nd->v.i = 0;
    return 0;
}

static inline void skip_ws(Parser *p) {
    while (p->pos < p->len && WS[p->b[p->pos]]) p->pos++;
}

static inline int parse_string(Parser *p) {
    /* at the opening quote */
    uint32_t idx;
    int rc = new_node(p, T_STR, &idx);
    if (rc) return rc;
    size_t i = p->pos + 1, len = p->len;
    const uint8_t *b = p->b;
    uint8_t esc = 0;
    while (1) {
        while (i < len && STR_PLAIN[b[i]]) i++;
        if (i >= len) return SLOW;
        uint8_t c = b[i];
        if (c == '"') break;
        if (c != '\\') return SLOW; /* control byte or non-ASCII: the Python path decides */
        if (i + 1 >= len) return SLOW;
        switch (b[i + 1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                esc = 1;
                i += 2;
                break;
            default:
                return SLOW; /* \u escapes and invalid escapes */
        }
    }
    Node *nd = &p->nodes[idx];
    nd->s = (uint32_t)(p->pos + 1);
    nd->e = (uint32_t)i;
    nd->esc = esc;
    nd->next = p->nn;
    p->pos = i + 1;
    return 0;
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int parse_number(Parser *p) {
    const uint8_t *b = p->b;
    size_t i = p->pos, len = p->len, start = p->pos;
    int neg = 0, is_float = 0;
    if (b[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= len) return SLOW;
    uint64_t mant = 0;
    int overflow = 0, nonzero = 0;
    if (b[i] == '0') {
        i++;
    } else if (b[i] >= '1' && b[i] <= '9') {
        while (i < len && b[i] >= '0' && b[i] <= '9') {
            if (mant > (UINT64_MAX - 9) / 10) overflow = 1;
            else mant = mant * 10 + (b[i] - '0');
            if (b[i] != '0') nonzero = 1;
            i++;
        }
    } else {
        return SLOW;
    }
    int frac_digits = 0;
    if (i < len && b[i] == '.') {
        is_float = 1;
        i++;
        if (i >= len || b[i] < '0' || b[i] > '9') return SLOW;
        while (i < len && b[i] >= '0' && b[i] <= '9') {
            if (mant > (UINT64_MAX - 9) / 10) overflow = 1;
            else mant = mant * 10 + (b[i] - '0');
            if (b[i] != '0') nonzero = 1;
            frac_digits++;
            i++;
        }
    }
    long exp10 = 0;
    if (i < len && (b[i] == 'e' || b[i] == 'E')) {
        is_float = 1;
        i++;
        int eneg = 0;
        if (i < len && (b[i] == '+' || b[i] == '-')) {
            eneg = b[i] == '-';
            i++;
        }
        if (i >= len || b[i] < '0' || b[i] > '9') return SLOW;
        while (i < len && b[i] >= '0' && b[i] <= '9') {
            if (exp10 < 100000) exp10 = exp10 * 10 + (b[i] - '0');
            i++;
        }
        if (eneg) exp10 = -exp10;
    }
    uint32_t idx;
    int rc = new_node(p, is_float ? T_FLT : T_INT, &idx);
    if (rc) return rc;
    Node *nd = &p->nodes[idx];
    if (!is_float) {
        if (overflow) return SLOW;
        if (neg) {
            if (mant > (uint64_t)INT64_MAX + 1) return SLOW;
            nd->v.i = mant == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mant;
        } else {
            if (mant > (uint64_t)INT64_MAX) return SLOW;
            nd->v.i = (int64_t)mant;
        }
    } else {
        double d;
        long e = exp10 - frac_digits;
        if (!overflow && mant <= (1ULL << 53) && e >= -22 && e <= 22) {
            /* Clinger's fast path: both operands exact, one correctly rounded operation */
            d = (double)mant;
            d = e < 0 ? d / POW10[-e] : d * POW10[e];
        } else {
            char tmp[64];
            size_t n = i - start;
            if (n >= sizeof tmp) return SLOW;
            memcpy(tmp, b + start, n);
            tmp[n] = 0;
            char *endp;
            d = strtod(tmp, &endp);
            if (endp != tmp + n) return SLOW;
            if (!isfinite(d)) return SLOW;
            if (d == 0.0 && nonzero) return SLOW;     /* underflow */
            if (d != 0.0 && fabs(d) < DBL_MIN) return SLOW; /* subnormal */
            neg = 0; /* strtod read the sign */
        }
        if (neg) d = -d;
        nd->v.d = d;
    }
    nd->next = p->nn;
    p->pos = i;
    return 0;
}

static int parse_value(Parser *p, int depth) {
    skip_ws(p);
    if (p->pos >= p->len) return SLOW;
    uint8_t c = p->b[p->pos];
    if (c == '"') return parse_string(p);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p);
    if (c == '[' || c == '{') {
        if (depth >= MAX_DEPTH) return SLOW;
        int obj = c == '{';
        uint32_t idx;
        int rc = new_node(p, obj ? T_OBJ : T_ARR, &idx);
        if (rc) return rc;
        uint8_t close = obj ? '}' : ']';
        uint32_t n = 0;
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->b[p->pos] == close) {
            p->pos++;
        } else {
            while (1) {
                if (obj) {
                    skip_ws(p);
                    if (p->pos >= p->len || p->b[p->pos] != '"') return SLOW;
                    if ((rc = parse_string(p))) return rc;
                    skip_ws(p);
                    if (p->pos >= p->len || p->b[p->pos] != ':') return SLOW;
                    p->pos++;
                }
                skip_ws(p);
                if (p->pos >= p->len) return SLOW;
                c = p->b[p->pos];
                /* scalars parsed here, without another recursive call (most of a log's nodes) */
                if ((c >= '0' && c <= '9') || c == '-') rc = parse_number(p);
                else if (c == '"') rc = parse_string(p);
                else rc = parse_value(p, depth + 1);
                if (rc) return rc;
                n++;
                skip_ws(p);
                if (p->pos >= p->len) return SLOW;
                if (p->b[p->pos] == ',') {
                    p->pos++;
                    continue;
                }
                if (p->b[p->pos] == close) {
                    p->pos++;
                    break;
                }
                return SLOW;
            }
        }
        p->nodes[idx].n = n;
        p->nodes[idx].next = p->nn;
        return 0;
    }
    const char *lit;
    uint8_t type;
    if (c == 't') {
        lit = "true";
        type = T_TRUE;
    } else if (c == 'f') {
        lit = "false";
        type = T_FALSE;
    } else if (c == 'n') {
        lit = "null";
        type = T_NULL;
    } else {
        return SLOW;
    }
    size_t n = strlen(lit);
    if (p->len - p->pos < n || memcmp(p->b + p->pos, lit, n)) return SLOW;
    uint32_t idx;
    int rc = new_node(p, type, &idx);
    if (rc) return rc;
    p->nodes[idx].next = p->nn;
    p->pos += n;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ strings */

/* readers.ANSOR_STEP_ARGS: every step kind TVM's auto_scheduler writes and the layout of the arguments its reader
   takes ("i" an integer, null or boolean; "L" a list; "s" a string); readers.ANSOR_STEP_SIGNATURES. The layout is
   checked, not the values' ranges (TVM reads an int32, a bool for SP's inner_to_outer) */
static const struct {
    const char *kind, *sig;
} step_args[] = {{"AN", "iii"},  {"FU", "iL"},   {"PR", "iis"},    {"RE", "iL"},   {"SP", "iiiLi"},
                 {"FSP", "iiii"}, {"FFSP", "iiLii"}, {"SA", "iiii"}, {"CA", "iii"},   {"CI", "i"},
                 {"CR", "i"},    {"CHR", "isL"},  {"CHW", "is"},    {"RF", "iii"}};

/* the argument layout of a known step kind, or NULL for a kind TVM does not write */
static const char *step_signature(const void *p, Py_ssize_t n) {
    for (size_t i = 0; i < sizeof step_args / sizeof step_args[0]; i++)
        if ((Py_ssize_t)strlen(step_args[i].kind) == n && memcmp(step_args[i].kind, p, (size_t)n) == 0)
            return step_args[i].sig;
    return NULL;
}

/* the string's value (escapes decoded) into scratch; returns its length or -1 on no memory */
static Py_ssize_t str_value(const uint8_t *line, const Node *nd, Buf *scratch) {
    scratch->n = 0;
    if (!nd->esc) {
        if (buf_put(scratch, line + nd->s, nd->e - nd->s)) return -1;
        return (Py_ssize_t)scratch->n;
    }
    if (buf_grow(scratch, nd->e - nd->s)) return -1;
    char *o = scratch->p;
    size_t k = 0;
    for (uint32_t i = nd->s; i < nd->e; i++) {
        uint8_t c = line[i];
        if (c == '\\') {
            uint8_t d = line[++i];
            switch (d) {
                case 'b': c = '\b'; break;
                case 'f': c = '\f'; break;
                case 'n': c = '\n'; break;
                case 'r': c = '\r'; break;
                case 't': c = '\t'; break;
                default: c = d; /* '"', '\\', '/' */
            }
        }
        o[k++] = (char)c;
    }
    scratch->n = k;
    return (Py_ssize_t)k;
}

typedef struct {
    uint64_t hash;
    uint32_t off, len;
    int32_t id;
} Slot;

typedef struct {
    Slot *slots;
    uint32_t cap, count;
    Buf data;  /* unique strings, back to back */
    Buf offs;  /* uint32 start of each unique string; one more at the end */
} Interner;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int intern(Interner *t, const char *s, size_t n, int32_t *id) {
    if (t->count * 2 >= t->cap) { /* grow (and the first allocation): empty slots have id -1 */
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        Slot *slots = (Slot *)malloc((size_t)cap * sizeof(Slot));
        if (!slots) return NOMEM;
        for (uint32_t i = 0; i < cap; i++) slots[i].id = -1;
        for (uint32_t i = 0; i < t->cap; i++) {
            if (t->slots[i].id < 0) continue;
            uint32_t j = (uint32_t)t->slots[i].hash & (cap - 1);
            while (slots[j].id >= 0) j = (j + 1) & (cap - 1);
            slots[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    uint64_t h = fnv1a(s, n);
    uint32_t j = (uint32_t)h & (t->cap - 1);
    while (t->slots[j].id >= 0) {
        Slot *sl = &t->slots[j];
        if (sl->hash == h && sl->len == n && memcmp(t->data.p + sl->off, s, n) == 0) {
            *id = sl->id;
            return 0;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (t->data.n + n > UINT32_MAX) return SLOW;
    Slot *sl = &t->slots[j];
    sl->hash = h;
    sl->off = (uint32_t)t->data.n;
    sl->len = (uint32_t)n;
    sl->id = (int32_t)t->count++;
    if (buf_put(&t->data, s, n)) return NOMEM;
    uint32_t off = sl->off;
    if (buf_put(&t->offs, &off, 4)) return NOMEM;
    *id = sl->id;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ records */

enum {
    O_LINE, O_SPAN, O_RID, O_VID, O_TID, O_KID, O_HW, O_HWOK, O_COST_OFF, O_COST, O_MEAN, O_VALID, O_ERR,
    O_ALLC, O_ALLC_OK, O_TS, O_TS_OK, O_STEP_OFF, O_KIND_OFF, O_KIND, O_INTS_OFF, O_INTS, O_LISTS_OFF,
    O_INNER_OFF, O_LISTS, O_STRS_OFF, O_STR_OFF, O_STR, O_FLOATS_OFF, O_FLOATS, O_SLOW, N_OUT
};

static const char *OUT_NAMES[N_OUT] = {
    "line", "span", "record_id", "version_id", "target_id", "key_id", "hw", "hw_ok", "cost_off", "costs",
    "mean", "valid", "error_no", "all_cost", "all_cost_ok", "timestamp", "timestamp_ok", "step_off",
    "kind_off", "kind", "ints_off", "ints", "lists_off", "inner_off", "lists", "strs_off", "str_off", "str",
    "floats_off", "floats", "slow"};

typedef struct {
    Buf o[N_OUT];
    Interner strings;
    Buf scratch;
    Buf costs_tmp;
    double failed_threshold;
} Out;

static inline int is_str(const Node *nd) { return nd->type == T_STR; }

/* the record's columns appended to out; SLOW leaves out unchanged (the caller restores the marks) */
static int emit_record(Out *out, const uint8_t *line, size_t len, Node *N, int64_t lineno, size_t base) {
    Node *root = &N[0];
    if (root->type != T_OBJ) return SLOW;
    int64_t ii = -1, ri = -1, vi = -1;
    uint32_t k = 1;
    for (uint32_t q = 0; q < root->n; q++) {
        Node *key = &N[k];
        uint32_t val = k + 1;
        if (!key->esc && key->e - key->s == 1) {
            uint8_t c = line[key->s];
            int64_t *slot = c == 'i' ? &ii : c == 'r' ? &ri : c == 'v' ? &vi : NULL;
            if (slot) {
                if (*slot >= 0) return SLOW; /* duplicate key: orjson keeps the last; let Python say so */
                *slot = val;
            }
        }
        k = N[val].next;
    }
    if (ii < 0 || ri < 0) return SLOW;
    /* version */
    int32_t vid, tid, kid;
    int rc;
    if (vi < 0) {
        if ((rc = intern(&out->strings, "v0.1", 4, &vid))) return rc;
    } else {
        if (!is_str(&N[vi])) return SLOW;
        Py_ssize_t n = str_value(line, &N[vi], &out->scratch);
        if (n < 0) return NOMEM;
        const char *v = out->scratch.p;
        /* Ansor wrote v0.1 ... v0.6; anything else: let Python quarantine it with the reason */
        if (n != 4 || v[0] != 'v' || v[1] != '0' || v[2] != '.' || v[3] < '1' || v[3] > '6') return SLOW;
        if ((rc = intern(&out->strings, out->scratch.p, (size_t)n, &vid))) return rc;
    }
    /* i: [task, state] */
    Node *I = &N[ii];
    if (I->type != T_ARR || I->n != 2) return SLOW;
    uint32_t task = (uint32_t)ii + 1;
    if (N[task].type != T_ARR || N[task].n < 2 || N[task].n > 6) return SLOW;
    uint32_t state = N[task].next;
    uint32_t wk = task + 1, tg = N[wk].next;
    if (!is_str(&N[wk]) || !is_str(&N[tg])) return SLOW;
    int64_t hw[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t hw_ok = 0;
    if (N[task].n > 2) {
        uint32_t h = N[tg].next;
        if (N[h].type == T_ARR) {
            if (N[h].n != 8) return SLOW;
            for (uint32_t j = 0; j < 8; j++) {
                if (N[h + 1 + j].type != T_INT) return SLOW;
                hw[j] = N[h + 1 + j].v.i;
            }
            hw_ok = 1;
        } else if (N[h].type != T_NULL) {
            return SLOW;
        }
    }
    if (N[state].type != T_ARR || N[state].n != 2) return SLOW;
    uint32_t steps = N[state + 1].next;
    if (N[steps].type != T_ARR) return SLOW;
    /* r: [costs, error_no, all_cost, timestamp, ...] */
    Node *R = &N[ri];
    if (R->type != T_ARR || R->n < 4) return SLOW;
    uint32_t ci = (uint32_t)ri + 1, ei = N[ci].next, ai = N[ei].next, ti = N[ai].next;
    if (N[ci].type != T_ARR) return SLOW;
    if (N[ei].type != T_INT || N[ei].v.i < 0 || N[ei].v.i >= (1LL << 31)) return SLOW;
    int64_t err = N[ei].v.i;
    double allc = 0.0, ts = 0.0;
    uint8_t allc_ok = 0, ts_ok = 0;
    if (N[ai].type == T_INT) { allc = (double)N[ai].v.i; allc_ok = 1; }
    else if (N[ai].type == T_FLT) { allc = N[ai].v.d; allc_ok = 1; }
    else if (N[ai].type != T_NULL) return SLOW;
    if (N[ti].type == T_INT) { ts = (double)N[ti].v.i; ts_ok = 1; }
    else if (N[ti].type == T_FLT) { ts = N[ti].v.d; ts_ok = 1; }
    else if (N[ti].type != T_NULL) return SLOW;
    /* costs (summarize_costs) */
    Buf *ct = &out->costs_tmp;
    ct->n = 0;
    uint32_t nc = N[ci].n;
    int ok = err == 0 && nc > 0;
    for (uint32_t j = 0, c = ci + 1; j < nc; j++, c = N[c].next) {
        double v;
        if (N[c].type == T_INT) v = (double)N[c].v.i;
        else if (N[c].type == T_FLT) v = N[c].v.d;
        else if (N[c].type == T_NULL) v = NAN;
        else return SLOW; /* strings ("inf"), booleans, containers: the Python path */
        if (!(0.0 < v && v < out->failed_threshold)) ok = 0;
        if (buf_put(ct, &v, sizeof v)) return NOMEM;
    }
    float mean = 0.0f;
    if (ok) {
        double sum;
        if (fsum_finite((const double *)ct->p, nc, &sum)) return SLOW;
        mean = (float)(sum / (double)nc);
        if (!(0.0 < (double)mean && (double)mean < out->failed_threshold)) {
            ok = 0;
            mean = 0.0f;
        }
    }
    /* steps: validated and appended; a malformed one makes the record slow */
    Buf *O = out->o;
    for (uint32_t j = 0, st = steps + 1; j < N[steps].n; j++, st = N[st].next) {
        if (N[st].type != T_ARR || N[st].n == 0 || !is_str(&N[st + 1])) return SLOW;
        Py_ssize_t n = str_value(line, &N[st + 1], &out->scratch);
        if (n < 0) return NOMEM;
        const char *sig = step_signature(out->scratch.p, n);
        if (!sig) return SLOW; /* the Python path quarantines it, naming the kind */
        if ((size_t)(N[st].n - 1) != strlen(sig)) return SLOW; /* arguments TVM does not read: likewise */
        if (buf_put(&O[O_KIND], out->scratch.p, (size_t)n)) return NOMEM;
        PUT(&O[O_KIND_OFF], int32_t, O[O_KIND].n);
        for (uint32_t a = N[st + 1].next, q = 1; q < N[st].n; q++, a = N[a].next) {
            Node *A = &N[a];
            if ((A->type == T_STR) != (sig[q - 1] == 's') || (A->type == T_ARR) != (sig[q - 1] == 'L')) return SLOW;
            switch (A->type) {
                case T_INT: PUT(&O[O_INTS], int64_t, A->v.i); break;
                case T_NULL: PUT(&O[O_INTS], int64_t, -1); break;
                case T_TRUE: PUT(&O[O_INTS], int64_t, 1); break;
                case T_FALSE: PUT(&O[O_INTS], int64_t, 0); break;
                case T_FLT: return SLOW; /* no argument of a step is a float: the Python path quarantines it */
                case T_STR: {
                    Py_ssize_t m = str_value(line, A, &out->scratch);
                    if (m < 0) return NOMEM;
                    if (buf_put(&O[O_STR], out->scratch.p, (size_t)m)) return NOMEM;
                    PUT(&O[O_STR_OFF], int32_t, O[O_STR].n);
                    break;
                }
                case T_ARR: {
                    for (uint32_t x = 0, y = a + 1; x < A->n; x++, y = N[y].next) {
                        uint8_t t = N[y].type;
                        int64_t v = t == T_INT ? N[y].v.i : t == T_NULL ? -1 : t == T_TRUE ? 1 : 0;
                        if (t != T_INT && t != T_NULL && t != T_TRUE && t != T_FALSE) return SLOW;
                        PUT(&O[O_LISTS], int64_t, v);
                    }
                    PUT(&O[O_INNER_OFF], int32_t, O[O_LISTS].n / 8);
                    break;
                }
                default: return SLOW; /* an object */
            }
        }
        PUT(&O[O_INTS_OFF], int32_t, O[O_INTS].n / 8);
        PUT(&O[O_LISTS_OFF], int32_t, O[O_INNER_OFF].n / 4 - 1);
        PUT(&O[O_STRS_OFF], int32_t, O[O_STR_OFF].n / 4 - 1);
        PUT(&O[O_FLOATS_OFF], int32_t, O[O_FLOATS].n / 8);
    }
    /* strings last (interning cannot be rolled back, but an interned string that no row uses is harmless) */
    Py_ssize_t n = str_value(line, &N[wk], &out->scratch);
    if (n < 0) return NOMEM;
    if ((rc = intern(&out->strings, out->scratch.p, (size_t)n, &kid))) return rc;
    n = str_value(line, &N[tg], &out->scratch);
    if (n < 0) return NOMEM;
    if ((rc = intern(&out->strings, out->scratch.p, (size_t)n, &tid))) return rc;
    PUT(&O[O_STEP_OFF], int32_t, O[O_KIND_OFF].n / 4 - 1);
    PUT(&O[O_LINE], int64_t, lineno);
    PUT(&O[O_SPAN], int64_t, (int64_t)base);
    PUT(&O[O_SPAN], int64_t, (int64_t)(base + len));
    char rid[16];
    blake2b64_hex(line, len, rid);
    if (buf_put(&O[O_RID], rid, 16)) return NOMEM;
    PUT(&O[O_VID], int32_t, vid);
    PUT(&O[O_TID], int32_t, tid);
    PUT(&O[O_KID], int32_t, kid);
    if (buf_put(&O[O_HW], hw, sizeof hw)) return NOMEM;
    PUT(&O[O_HWOK], uint8_t, hw_ok);
    if (buf_put(&O[O_COST], ct->p, ct->n)) return NOMEM;
    PUT(&O[O_COST_OFF], int32_t, O[O_COST].n / 8);
    PUT(&O[O_MEAN], float, mean);
    PUT(&O[O_VALID], uint8_t, ok);
    PUT(&O[O_ERR], int32_t, err);
    PUT(&O[O_ALLC], double, allc);
    PUT(&O[O_ALLC_OK], uint8_t, allc_ok);
    PUT(&O[O_TS], double, ts);
    PUT(&O[O_TS_OK], uint8_t, ts_ok);
    return 0;
nomem:
    return NOMEM;
}

static void out_free(Out *out) {
    for (int i = 0; i < N_OUT; i++) free(out->o[i].p);
    free(out->strings.slots);
    free(out->strings.data.p);
    free(out->strings.offs.p);
    free(out->scratch.p);
    free(out->costs_tmp.p);
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long first_line;
    int strip_bom;
    double threshold;
    if (!PyArg_ParseTuple(args, "y*Lpd", &view, &first_line, &strip_bom, &threshold)) return NULL;
    if ((size_t)view.len > MAX_BLOCK_BYTES) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: block larger than 256 MB");
        return NULL;
    }
    Out out;
    memset(&out, 0, sizeof out);
    out.failed_threshold = threshold;
    Parser p;
    memset(&p, 0, sizeof p);
    const uint8_t *data = (const uint8_t *)view.buf;
    size_t len = (size_t)view.len, pos = 0;
    long long lineno = first_line, n_lines = 0, n_comments = 0;
    int failed = 0;
    size_t mark[N_OUT];
    Buf *O = out.o;
    /* leading zero of every offsets array */
    int32_t zero = 0;
    int offs[] = {O_COST_OFF, O_STEP_OFF, O_KIND_OFF, O_INTS_OFF, O_LISTS_OFF, O_INNER_OFF, O_STRS_OFF,
                  O_STR_OFF, O_FLOATS_OFF};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++)
        if (buf_put(&O[offs[i]], &zero, 4)) failed = 1;
    Py_BEGIN_ALLOW_THREADS
    while (!failed && pos < len) {
        const uint8_t *nl = (const uint8_t *)memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        size_t next = nl ? end + 1 : len;
        size_t s = pos, e = end;
        if (e > s && data[e - 1] == '\r') e--;
        if (strip_bom && lineno == first_line && e - s >= 3 && data[s] == 0xEF && data[s + 1] == 0xBB &&
            data[s + 2] == 0xBF)
            s += 3;
        n_lines++;
        size_t f = s;
        while (f < e && STRIP_WS[data[f]]) f++;
        if (f == e || data[f] == '#' || data[s] == ' ') { /* TVM's RecordReader skips lines starting '#' or ' ' */
            n_comments++;
        } else {
            p.b = data + s;
            p.pos = 0;
            p.len = e - s;
            p.nn = 0;
            int rc = p.len > UINT32_MAX / 2 ? SLOW : parse_value(&p, 0);
            if (rc == 0) {
                skip_ws(&p);
                if (p.pos != p.len) rc = SLOW;
            }
            if (rc == 0) {
                for (int i = 0; i < N_OUT; i++) mark[i] = O[i].n;
                rc = emit_record(&out, data + s, e - s, p.nodes, lineno, s);
                if (rc == SLOW)
                    for (int i = 0; i < N_OUT; i++) O[i].n = mark[i];
            }
            if (rc == NOMEM) {
                failed = 1;
                break;
            }
            if (rc == SLOW) {
                int64_t t[3] = {lineno, (int64_t)s, (int64_t)e};
                if (buf_put(&O[O_SLOW], t, sizeof t)) {
                    failed = 1;
                    break;
                }
            }
        }
        lineno++;
        pos = next;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    free(p.nodes);
    uint32_t endoff = (uint32_t)out.strings.data.n;
    if (!failed && buf_put(&out.strings.offs, &endoff, 4)) failed = 1;
    if (failed) {
        out_free(&out);
        return PyErr_NoMemory();
    }
    PyObject *d = PyDict_New();
    if (!d) goto error;
    for (int i = 0; i < N_OUT; i++) {
        PyObject *b = PyBytes_FromStringAndSize(O[i].p ? O[i].p : "", (Py_ssize_t)O[i].n);
        if (!b || PyDict_SetItemString(d, OUT_NAMES[i], b)) {
            Py_XDECREF(b);
            goto error;
        }
        Py_DECREF(b);
    }
    {
        PyObject *sd = PyBytes_FromStringAndSize(out.strings.data.p ? out.strings.data.p : "",
                                                 (Py_ssize_t)out.strings.data.n);
        PyObject *so = PyBytes_FromStringAndSize(out.strings.offs.p, (Py_ssize_t)out.strings.offs.n);
        PyObject *nl = PyLong_FromLongLong(n_lines), *nc = PyLong_FromLongLong(n_comments);
        int bad = !sd || !so || !nl || !nc || PyDict_SetItemString(d, "strings", sd) ||
                  PyDict_SetItemString(d, "strings_off", so) || PyDict_SetItemString(d, "n_lines", nl) ||
                  PyDict_SetItemString(d, "n_comments", nc);
        Py_XDECREF(sd);
        Py_XDECREF(so);
        Py_XDECREF(nl);
        Py_XDECREF(nc);
        if (bad) goto error;
    }
    out_free(&out);
    return d;
error:
    Py_XDECREF(d);
    out_free(&out);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------ MetaSchedule */

/* ms_trace(insts, decisions, lists) appends one MetaSchedule trace to the 11 Python lists of a readers._Columns
   (step_kind, ints_val, ints_off, lists_val, lists_inner_off, lists_off, strs_val, strs_off, floats_val, floats_off,
   step_offsets) exactly as _Columns._add_ms_trace_py does, and returns the number of instructions; it returns None
   (leaving the lists for the caller to roll back) for anything it is not sure of: a malformed instruction or
   decision, an integer beyond int64, a non-ASCII or doubly signed numeric input, a dict, deep nesting, a type the
   Python path rejects. The Python path then gives the reference result or error. Values are the objects the JSON
   parser made (appended by reference); only bools and ints read as floats become new objects. */
enum { L_KIND, L_INTS, L_INTS_OFF, L_LISTS, L_INNER_OFF, L_LISTS_OFF, L_STRS, L_STRS_OFF, L_FLOATS, L_FLOATS_OFF,
       L_STEPS_OFF, N_LISTS };
#define MS_UNSURE 1 /* hand the trace back to the Python path */
#define MS_MAX_DEPTH 64

static int append_new(PyObject *list, PyObject *v) {
    if (!v) return -1;
    int r = PyList_Append(list, v);
    Py_DECREF(v);
    return r;
}

static int append_len(PyObject *dst, PyObject *of, Py_ssize_t minus) {
    return append_new(dst, PyLong_FromSsize_t(PyList_GET_SIZE(of) - minus));
}

/* 0: an exact int within int64; MS_UNSURE: beyond it */
static int int64_ok(PyObject *a) {
    int overflow = 0;
    (void)PyLong_AsLongLongAndOverflow(a, &overflow);
    if (overflow) return MS_UNSURE;
    return PyErr_Occurred() ? -1 : 0;
}

/* _Columns._add_ms_value */
static int ms_value(PyObject **L, PyObject *a, int depth) {
    if (PyLong_CheckExact(a)) {
        int r = int64_ok(a);
        return r ? r : PyList_Append(L[L_INTS], a);
    }
    if (PyBool_Check(a)) return append_new(L[L_INTS], PyLong_FromLong(a == Py_True));
    if (PyFloat_CheckExact(a)) return PyList_Append(L[L_FLOATS], a);
    if (PyUnicode_CheckExact(a)) return PyList_Append(L[L_STRS], a);
    if (a == Py_None) return 0;
    if (!PyList_CheckExact(a) || depth >= MS_MAX_DEPTH) return MS_UNSURE; /* a dict (sorted JSON text), ... */
    Py_ssize_t n = PyList_GET_SIZE(a);
    int all_int = 1, all_num = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(a, i);
        if (!PyLong_CheckExact(x)) {
            all_int = 0;
            if (!PyFloat_CheckExact(x)) all_num = 0;
        }
    }
    if (all_int) { /* (an empty list too) */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PyList_GET_ITEM(a, i);
            int r = int64_ok(x);
            if (r || PyList_Append(L[L_LISTS], x)) return r ? r : -1;
        }
        return append_len(L[L_INNER_OFF], L[L_LISTS], 0);
    }
    if (all_num) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PyList_GET_ITEM(a, i);
            if (PyFloat_CheckExact(x)) {
                if (PyList_Append(L[L_FLOATS], x)) return -1;
                continue;
            }
            double v = PyLong_AsDouble(x);
            if (v == -1.0 && PyErr_Occurred()) { /* too large for a float: the Python path raises */
                PyErr_Clear();
                return MS_UNSURE;
            }
            if (append_new(L[L_FLOATS], PyFloat_FromDouble(v))) return -1;
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = ms_value(L, PyList_GET_ITEM(a, i), depth + 1);
        if (r) return r;
    }
    return 0;
}

/* one literal input of an instruction (SSA names are dropped: counted in *names when they start with an ASCII letter
   or '_') */
static int ms_input(PyObject **L, PyObject *a, Py_ssize_t *names) {
    if (PyLong_CheckExact(a)) {
        int r = int64_ok(a);
        return r ? r : PyList_Append(L[L_INTS], a);
    }
    if (PyFloat_CheckExact(a)) return PyList_Append(L[L_FLOATS], a);
    if (!PyUnicode_CheckExact(a)) return 0; /* the Python path ignores other types here */
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    if (n == 0) return 0;
    if (!PyUnicode_IS_ASCII(a)) return MS_UNSURE; /* str.isdigit and str.strip on any Unicode: the Python path */
    const char *s = (const char *)PyUnicode_1BYTE_DATA(a);
    if (s[0] == '"') { /* a.strip('"') */
        Py_ssize_t i = 0, j = n;
        while (i < j && s[i] == '"') i++;
        while (j > i && s[j - 1] == '"') j--;
        return append_new(L[L_STRS], PyUnicode_Substring(a, i, j));
    }
    if (s[0] != '-' && (s[0] < '0' || s[0] > '9')) { /* an SSA name */
        if ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_') (*names)++;
        return 0;
    }
    Py_ssize_t k = 0;
    while (k < n && s[k] == '-') k++;
    if (k == n) return 0; /* lstrip("-") leaves "": not digits */
    for (Py_ssize_t i = k; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    if (k > 1 || n - k > 19) return MS_UNSURE; /* int("--5") raises; 20+ digits: beyond int64 or zero-padded */
    PyObject *v = PyLong_FromString(s, NULL, 10);
    if (!v) return -1;
    int r = int64_ok(v);
    if (r) {
        Py_DECREF(v);
        return r;
    }
    return append_new(L[L_INTS], v);
}

static int ms_trace_into(PyObject **L, PyObject *insts, PyObject *decisions, PyObject *dec) {
    Py_ssize_t nd = PyList_GET_SIZE(decisions);
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *d = PyList_GET_ITEM(decisions, i);
        if (!PyList_CheckExact(d) || PyList_GET_SIZE(d) != 2 || !PyLong_CheckExact(PyList_GET_ITEM(d, 0)))
            return MS_UNSURE;
        if (PyDict_SetItem(dec, PyList_GET_ITEM(d, 0), PyList_GET_ITEM(d, 1))) return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(insts);
    for (Py_ssize_t idx = 0; idx < n; idx++) {
        PyObject *inst = PyList_GET_ITEM(insts, idx);
        if (!PyList_CheckExact(inst) || PyList_GET_SIZE(inst) != 4 || !PyUnicode_CheckExact(PyList_GET_ITEM(inst, 0)))
            return MS_UNSURE;
        PyObject *inputs = PyList_GET_ITEM(inst, 1), *attrs = PyList_GET_ITEM(inst, 2);
        if (!PyList_CheckExact(inputs) || !PyList_CheckExact(attrs)) return MS_UNSURE;
        PyObject *kind = PyList_GET_ITEM(inst, 0);
        if (PyList_Append(L[L_KIND], kind)) return -1;
        Py_ssize_t names = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(inputs); i++) {
            int r = ms_input(L, PyList_GET_ITEM(inputs, i), &names);
            if (r) return r;
        }
        /* readers.MS_LOOP_LIST_KINDS: one -1 per loop taken, as a list */
        if (PyUnicode_CompareWithASCIIString(kind, "Fuse") == 0 ||
            PyUnicode_CompareWithASCIIString(kind, "Reorder") == 0) {
            for (Py_ssize_t i = 0; i < names; i++)
                if (append_new(L[L_LISTS], PyLong_FromLong(-1))) return -1;
            if (append_len(L[L_INNER_OFF], L[L_LISTS], 0)) return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(attrs); i++) {
            PyObject *a = PyList_GET_ITEM(attrs, i);
            int r = PyUnicode_CheckExact(a) ? PyList_Append(L[L_STRS], a) : ms_value(L, a, 0);
            if (r) return r;
        }
        if (PyDict_GET_SIZE(dec)) {
            PyObject *key = PyLong_FromSsize_t(idx);
            if (!key) return -1;
            PyObject *d = PyDict_GetItemWithError(dec, key); /* borrowed */
            int r = 0;
            if (d) {
                Py_INCREF(d);
                r = PyDict_DelItem(dec, key);
                if (!r) r = ms_value(L, d, 0);
                Py_DECREF(d);
            } else if (PyErr_Occurred()) {
                r = -1;
            }
            Py_DECREF(key);
            if (r) return r;
        }
        if (append_len(L[L_INTS_OFF], L[L_INTS], 0) || append_len(L[L_LISTS_OFF], L[L_INNER_OFF], 1) ||
            append_len(L[L_STRS_OFF], L[L_STRS], 0) || append_len(L[L_FLOATS_OFF], L[L_FLOATS], 0))
            return -1;
    }
    if (PyDict_GET_SIZE(dec)) return MS_UNSURE; /* a decision for a missing instruction: the Python path says so */
    return append_len(L[L_STEPS_OFF], L[L_KIND], 0);
}

static PyObject *py_ms_trace(PyObject *self, PyObject *args) {
    PyObject *insts, *decisions, *lists;
    if (!PyArg_ParseTuple(args, "OOO!", &insts, &decisions, &PyTuple_Type, &lists)) return NULL;
    if (PyTuple_GET_SIZE(lists) != N_LISTS) {
        PyErr_SetString(PyExc_ValueError, "ms_trace: expected a tuple of 11 lists");
        return NULL;
    }
    PyObject *L[N_LISTS];
    for (int i = 0; i < N_LISTS; i++) {
        L[i] = PyTuple_GET_ITEM(lists, i);
        if (!PyList_CheckExact(L[i])) {
            PyErr_SetString(PyExc_TypeError, "ms_trace: expected a tuple of 11 lists");
            return NULL;
        }
    }
    if (!PyList_CheckExact(insts) || !PyList_CheckExact(decisions)) Py_RETURN_NONE;
    PyObject *dec = PyDict_New();
    if (!dec) return NULL;
    int r = ms_trace_into(L, insts, decisions, dec);
    Py_DECREF(dec);
    if (r < 0) return NULL;
    if (r == MS_UNSURE) Py_RETURN_NONE;
    return PyLong_FromSsize_t(PyList_GET_SIZE(insts));
}

static PyObject *py_blake2b64(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    char out[16];
    blake2b64_hex((const uint8_t *)view.buf, (size_t)view.len, out);
    PyBuffer_Release(&view);
    return PyUnicode_FromStringAndSize(out, 16);
}

static PyObject *py_fsum(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    double r;
    int rc = fsum_finite((const double *)view.buf, (size_t)view.len / sizeof(double), &r);
    PyBuffer_Release(&view);
    if (rc) Py_RETURN_NONE;
    return PyFloat_FromDouble(r);
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(block, first_line, strip_bom, failed_threshold) -> dict of packed columns (see the module docstring)"},
    {"blake2b64", py_blake2b64, METH_VARARGS, "blake2b64(data) -> hashlib.blake2b(data, digest_size=8).hexdigest()"},
    {"fsum", py_fsum, METH_VARARGS, "fsum(float64 bytes) -> math.fsum of finite values (None if out of partials)"},
    {"ms_trace", py_ms_trace, METH_VARARGS,
     "ms_trace(insts, decisions, lists) -> instructions appended, or None: the Python path decides (see above)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan",
                                    "Compiled fast path of the Ansor log reader (readers.read_ansor).", -1, METHODS};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    PyObject *m = PyModule_Create(&MODULE);
    if (m && PyModule_AddIntConstant(m, "MAX_BLOCK_BYTES", (long)MAX_BLOCK_BYTES)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
