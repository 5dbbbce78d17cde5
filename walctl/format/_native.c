/* walctl.format._native: the per-record loops of the WAL's record format in C (issue 19).
 *
 * Pure bytes in, bytes out: no I/O, no walctl state. walctl/format/bulk.py wraps every function
 * here and holds a pure-Python twin of each (WALCTL_NO_NATIVE=1, or no compiler at install);
 * tests/format/test_native.py checks that both give the same answers. The record layout is
 * docs/FORMATS.md 1.2 (RecordHeader) and 2 (StreamRecordBatch); every integer is big-endian.
 *
 *   crc32c(data, value=0)                                   -> int
 *   decode_records(buf, base_offset, start, end, lap_end, align, max_records, batches)
 *                                                           -> (rows: bytes, count, reason, pos, expected, found)
 *   pack_records(buf, pos, limit, offset, bodies, index, batch)
 *                                                           -> (count, pos)
 *   split_length_prefixed(buf, start, max_records)          -> (spans: bytes, count, next_pos)
 *   split_lines(buf, start, max_records)                    -> (spans: bytes, count, next_pos)
 *   rows_summary(rows, first, stop)                         -> (all_batch, one_stream, stream_id, follows, body_bytes)
 *   frame_pack(out, pos, limit, offset, src, start, end, lines, stream_id, epoch, base, max_records, max_payload,
 *              render)   -> (count, out_pos, src_pos, payload_bytes, last_offset, acks, stop, next_len)
 *              (each payload copied and CRC'd in one pass: copy_crc)
 *   frame_pack_cpu_ns()                                     -> int (CPU time in frame_pack's loops so far)
 *   hex_lines(buf, spans, first, stop) / base64_lines(...)   -> bytes (one encoded payload a line)
 *   record_lines(buf, rows, first, stop, mode)              -> bytes | None (recover's NDJSON lines with payloads)
 *
 * rows and spans are native-endian int64 arrays (memoryview.cast("q") reads them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- CRC-32C (Castagnoli): SSE4.2 instruction when the CPU has it, else slicing-by-8 ---- */

static uint32_t crc_table[8][256];

static void crc_init_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
}

static uint32_t crc_soft(uint32_t value, const uint8_t *p, size_t n)
{
    uint32_t c = ~value;
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

static uint32_t crc_shift256(uint32_t c, int s);

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define WALCTL_HAVE_SSE42 1
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t value, const uint8_t *p, size_t n)
{
    uint64_t c = (uint32_t)~value;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    /* three independent streams hide the instruction's 3-cycle latency on large blocks */
    while (n >= 3 * 256) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + 256, *p2 = p + 512;
        for (int i = 0; i < 256; i += 8) {
            uint64_t v0, v1, v2;
            memcpy(&v0, p + i, 8);
            memcpy(&v1, p1 + i, 8);
            memcpy(&v2, p2 + i, 8);
            c = _mm_crc32_u64(c, v0);
            c1 = _mm_crc32_u64(c1, v1);
            c2 = _mm_crc32_u64(c2, v2);
        }
        /* reg(A||B||C) = shift(reg A, 512) ^ shift(reg B, 256) ^ reg C (the register is linear) */
        c = crc_shift256((uint32_t)c, 2) ^ crc_shift256((uint32_t)c1, 1) ^ (uint32_t)c2;
        p += 768;
        n -= 768;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

/* Multiplying a raw CRC register by x^(8*256*k) modulo the polynomial: zlib's crc32_combine
 * idea, with the operator for 256 zero bytes tabulated per byte of the register. */
static uint32_t shift_table[3][4][256];

static uint32_t gf_multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ 0x82F63B78u : b >> 1;
    }
    return p;
}

/* x^(2^k) modulo the polynomial, k = 0..66 (filled by shift_init at the module's import): a 64-bit
 * length is 8 len < 2^67 bits. zlib keeps 32 and wraps k at 32, which holds for CRC-32 (x^(2^32) = x)
 * but not for Castagnoli's polynomial: the wrap gave wrong results for len >= 512 MiB. */
#define X2N_ENTRIES 67
static uint32_t x2n_table[X2N_ENTRIES];

/* x^(8 len) modulo the polynomial: the operator that appends len zero bytes to a CRC register */
static uint32_t x8nmodp(uint64_t len)
{
    uint32_t p = 1u << 31;
    int k = 3;
    while (len) {
        if (len & 1)
            p = gf_multmodp(x2n_table[k], p);
        len >>= 1;
        k++;
    }
    return p;
}

static void shift_init(void)
{
    x2n_table[0] = 1u << 30; /* x^1 (reflected: x^0 is the top bit) */
    for (int i = 1; i < X2N_ENTRIES; i++)
        x2n_table[i] = gf_multmodp(x2n_table[i - 1], x2n_table[i - 1]);
    for (int s = 1; s <= 2; s++) {
        uint32_t op = x8nmodp((uint64_t)256 * s);
        for (int byte = 0; byte < 4; byte++)
            for (uint32_t v = 0; v < 256; v++)
                shift_table[s][byte][v] = gf_multmodp(op, v << (8 * byte));
    }
}

static uint32_t crc_shift256(uint32_t c, int s)
{
    return shift_table[s][0][c & 0xFF] ^ shift_table[s][1][(c >> 8) & 0xFF] ^ shift_table[s][2][(c >> 16) & 0xFF] ^
           shift_table[s][3][c >> 24];
}

static uint32_t (*crc32c_fn)(uint32_t, const uint8_t *, size_t) = crc_soft;

/* ---- copy and CRC in one pass (issue 31: append's pack) ----
 * copy_crc(value, dst, src, n): memcpy(dst, src, n) and return crc32c_fn(value, dst, n), each byte
 * read once: the CRC is taken of the 16-byte words as they pass through the registers on their way
 * to dst (SSE4.2: the same three-stream interleave as crc_sse42), not of dst read back afterwards.
 * (Non-temporal stores to dst were tried: slower on the bench machine, 8- and 16-byte alike.)
 * The source is prefetched COPY_CRC_AHEAD bytes ahead of each stream (a prefetch past the end of
 * src never faults): frame_pack of 64 KiB records just read from a file took 6 % less CPU
 * with 1 MiB reads (src in L2), 12 % with 4 MiB reads (src in L3). */
#define COPY_CRC_AHEAD 2048
static uint32_t copy_crc_soft(uint32_t value, uint8_t *dst, const uint8_t *src, size_t n)
{
    memcpy(dst, src, n);
    return crc_soft(value, dst, n);
}

#ifdef WALCTL_HAVE_SSE42
__attribute__((target("sse4.2"))) static uint32_t copy_crc_sse42(uint32_t value, uint8_t *dst, const uint8_t *src,
                                                                 size_t n)
{
    uint64_t c = (uint32_t)~value;
    /* dst aligned to 16 for the vector loop only: a small payload (most of a 100-byte record's
     * packing) is not worth up to 15 dependent byte steps */
    while (n >= 3 * 256 + 15 && ((uintptr_t)dst & 15)) {
        *dst++ = *src;
        c = _mm_crc32_u8((uint32_t)c, *src++);
        n--;
    }
    while (n >= 3 * 256) {
        uint64_t c1 = 0, c2 = 0;
        for (int i = 0; i < 256; i += 16) {
            if (!(i & 63)) { /* a cache line of each stream, COPY_CRC_AHEAD bytes on (see above) */
                _mm_prefetch((const char *)src + COPY_CRC_AHEAD + i, _MM_HINT_T0);
                _mm_prefetch((const char *)src + COPY_CRC_AHEAD + 256 + i, _MM_HINT_T0);
                _mm_prefetch((const char *)src + COPY_CRC_AHEAD + 512 + i, _MM_HINT_T0);
            }
            __m128i x0 = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i x1 = _mm_loadu_si128((const __m128i *)(src + 256 + i));
            __m128i x2 = _mm_loadu_si128((const __m128i *)(src + 512 + i));
            c = _mm_crc32_u64(c, (uint64_t)_mm_cvtsi128_si64(x0));
            c1 = _mm_crc32_u64(c1, (uint64_t)_mm_cvtsi128_si64(x1));
            c2 = _mm_crc32_u64(c2, (uint64_t)_mm_cvtsi128_si64(x2));
            c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x0, 1));
            c1 = _mm_crc32_u64(c1, (uint64_t)_mm_extract_epi64(x1, 1));
            c2 = _mm_crc32_u64(c2, (uint64_t)_mm_extract_epi64(x2, 1));
            _mm_storeu_si128((__m128i *)(dst + i), x0);
            _mm_storeu_si128((__m128i *)(dst + 256 + i), x1);
            _mm_storeu_si128((__m128i *)(dst + 512 + i), x2);
        }
        c = crc_shift256((uint32_t)c, 2) ^ crc_shift256((uint32_t)c1, 1) ^ (uint32_t)c2;
        src += 768;
        dst += 768;
        n -= 768;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, src, 8);
        c = _mm_crc32_u64(c, v);
        memcpy(dst, &v, 8);
        src += 8;
        dst += 8;
        n -= 8;
    }
    if (n >= 4) { /* the last 0-7 bytes in at most three steps, not seven */
        uint32_t v;
        memcpy(&v, src, 4);
        c = _mm_crc32_u32((uint32_t)c, v);
        memcpy(dst, &v, 4);
        src += 4;
        dst += 4;
        n -= 4;
    }
    if (n >= 2) {
        uint16_t v;
        memcpy(&v, src, 2);
        c = _mm_crc32_u16((uint32_t)c, v);
        memcpy(dst, &v, 2);
        src += 2;
        dst += 2;
        n -= 2;
    }
    if (n) {
        *dst = *src;
        c = _mm_crc32_u8((uint32_t)c, *src);
    }
    return ~(uint32_t)c;
}
#endif

static uint32_t (*copy_crc_fn)(uint32_t, uint8_t *, const uint8_t *, size_t) = copy_crc_soft;

/* The CRCs of frame_pack's two headers, 33 bytes (the batch header, the payload's CRC starts
 * from it) and 20 (the record header's span), with no alignment loop: a 100-byte record's
 * packing spent a fifth of its time in crc_sse42's byte-wise prologue and tail for them. */
#ifdef WALCTL_HAVE_SSE42
__attribute__((target("sse4.2"))) static uint32_t crc33_sse42(const uint8_t *p)
{
    uint64_t c = 0xFFFFFFFFu, v;
    for (int i = 0; i < 32; i += 8) {
        memcpy(&v, p + i, 8);
        c = _mm_crc32_u64(c, v);
    }
    return ~_mm_crc32_u8((uint32_t)c, p[32]);
}

__attribute__((target("sse4.2"))) static uint32_t crc20_sse42(const uint8_t *p)
{
    uint64_t c = 0xFFFFFFFFu, v;
    uint32_t w;
    memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    memcpy(&v, p + 8, 8);
    c = _mm_crc32_u64(c, v);
    memcpy(&w, p + 16, 4);
    return ~_mm_crc32_u32((uint32_t)c, w);
}
#endif

static uint32_t crc33_soft(const uint8_t *p) { return crc_soft(0, p, 33); }
static uint32_t crc20_soft(const uint8_t *p) { return crc_soft(0, p, 20); }
static uint32_t (*crc33_fn)(const uint8_t *) = crc33_soft;
static uint32_t (*crc20_fn)(const uint8_t *) = crc20_soft;

/* ---- big-endian fields ---- */

static inline uint32_t be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline int64_t be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return (int64_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

static inline void put64(uint8_t *p, int64_t s)
{
    uint64_t v = (uint64_t)s;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

/* ---- constants shared with bulk.py (it checks them at import) ---- */

#define REC_SIZE 24
#define REC_CRC_SPAN 20
#define DATA_MAGIC 0x87654321u
#define PADDING_MAGIC 0x76543210u
#define BATCH_SIZE 33
#define BATCH_MAGIC 0x22
#define ROW 8

enum { KIND_BATCH = 0, KIND_DATA = 1, KIND_PADDING = 2 };
enum {
    R_END = 0, R_TRUNCATED_HEADER, R_ZEROED, R_BAD_MAGIC, R_HEADER_CRC, R_BAD_LENGTH, R_BAD_BODY_OFFSET,
    R_LOW_BODY_OFFSET, R_CROSSES_LAP, R_TRUNCATED_BODY, R_BODY_CRC, R_LIMIT
};

typedef struct {
    int64_t *v;
    Py_ssize_t len, cap;
} I64s;

static int i64s_grow(I64s *a, Py_ssize_t more)
{
    if (a->len + more <= a->cap)
        return 0;
    Py_ssize_t cap = a->cap ? a->cap * 2 : 1024;
    while (cap < a->len + more)
        cap *= 2;
    int64_t *v = realloc(a->v, (size_t)cap * sizeof(int64_t));
    if (v == NULL)
        return -1;
    a->v = v;
    a->cap = cap;
    return 0;
}

static PyObject *i64s_bytes(I64s *a)
{
    PyObject *out = PyBytes_FromStringAndSize((const char *)a->v, a->len * (Py_ssize_t)sizeof(int64_t));
    free(a->v);
    a->v = NULL;
    return out;
}

static int all_zero(const uint8_t *p, Py_ssize_t n)
{
    /* 32 bytes a step: a block's zero padding is up to 4 KiB per block */
    while (n >= 32) {
        uint64_t a, b, c, d;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        memcpy(&c, p + 16, 8);
        memcpy(&d, p + 24, 8);
        if (a | b | c | d)
            return 0;
        p += 32;
        n -= 32;
    }
    while (n-- > 0)
        if (*p++)
            return 0;
    return 1;
}

/* ---- crc32c(data, value=0) ---- */

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &b, &value))
        return NULL;
    uint32_t c;
    if (b.len >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        c = crc32c_fn(value, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
    } else {
        c = crc32c_fn(value, b.buf, (size_t)b.len);
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

/* ---- decode_records ----
 * Walks the records of buf[start:end], whose byte 0 sits at logical offset base_offset, doing
 * RecordHeader.decode(expected_offset=...)'s checks in its order, then the lap check, then
 * check_body's. A row per record: offset, body_pos, body_length, kind, and for a body that is
 * an intact StreamRecordBatch (the checks of StreamRecordBatch.decode(exact=True), only when
 * `batches`) stream_id, epoch, base_offset, count (else -1 each). Stops at the first failure
 * (its reason and values), at `end`, or after max_records rows (max_records < 0: no limit).
 * align > 0: a header failing at a logical offset that is not a multiple of align, followed by
 * zeros up to that multiple, is a block's zero padding: skipped, no row. */

typedef struct {
    int reason;
    Py_ssize_t pos;
    int64_t expected, found;
} Stop;

static int decode_loop(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t base, int64_t lap_end,
                       int64_t align, Py_ssize_t max_records, int batches, I64s *rows, Stop *st)
{
    Py_ssize_t count = 0;
    for (;;) {
        int64_t o = base + pos;
        int reason = R_END;
        int64_t expected = 0, found = 0;
        if (pos >= end) {
            st->reason = R_END;
            st->pos = pos;
            return 0;
        }
        if (max_records >= 0 && count >= max_records) {
            st->reason = R_LIMIT;
            st->pos = pos;
            return 0;
        }
        const uint8_t *h = b + pos;
        uint32_t magic = 0, length = 0, body_crc = 0;
        int64_t body_offset = 0;
        if (end - pos < REC_SIZE) {
            reason = R_TRUNCATED_HEADER;
            expected = REC_SIZE;
            found = end - pos;
        } else if (all_zero(h, REC_SIZE)) {
            reason = R_ZEROED;
        } else {
            magic = be32(h);
            length = be32(h + 4);
            body_offset = be64(h + 8);
            body_crc = be32(h + 16);
            uint32_t stored = be32(h + 20);
            if (magic != DATA_MAGIC && magic != PADDING_MAGIC) {
                reason = R_BAD_MAGIC;
                expected = DATA_MAGIC;
                found = magic;
            } else {
                uint32_t computed = crc32c_fn(0, h, REC_CRC_SPAN);
                if (computed != stored) {
                    reason = R_HEADER_CRC;
                    expected = computed;
                    found = stored;
                } else if (length == 0) {
                    reason = R_BAD_LENGTH;
                    found = 0;
                } else if (body_offset != o + REC_SIZE) {
                    reason = R_BAD_BODY_OFFSET;
                    expected = o + REC_SIZE;
                    found = body_offset;
                } else if (body_offset < REC_SIZE) {
                    reason = R_LOW_BODY_OFFSET;
                    found = body_offset;
                } else if (lap_end >= 0 && body_offset + (int64_t)length > lap_end) {
                    reason = R_CROSSES_LAP;
                    expected = lap_end;
                    found = body_offset + (int64_t)length;
                }
            }
        }
        if (reason != R_END) {
            if (align > 0 && o % align) {
                Py_ssize_t boundary = pos + (Py_ssize_t)(align - o % align);
                if (boundary <= end && all_zero(h, boundary - pos)) {
                    pos = boundary;
                    continue;
                }
            }
            st->reason = reason;
            st->pos = pos;
            st->expected = expected;
            st->found = found;
            return 0;
        }
        Py_ssize_t body_pos = pos + REC_SIZE;
        int kind = magic == PADDING_MAGIC ? KIND_PADDING : KIND_DATA;
        int64_t sid = -1, epoch = -1, bbase = -1, bcount = -1;
        if (kind == KIND_DATA) {
            if ((Py_ssize_t)length > end - body_pos) {
                st->reason = R_TRUNCATED_BODY;
                st->pos = pos;
                st->expected = length;
                st->found = end - body_pos;
                return 0;
            }
            uint32_t computed = crc32c_fn(0, b + body_pos, length);
            if (computed != body_crc) {
                st->reason = R_BODY_CRC;
                st->pos = pos;
                st->expected = computed;
                st->found = body_crc;
                return 0;
            }
            if (batches && length >= BATCH_SIZE) {
                const uint8_t *q = b + body_pos;
                int64_t s = be64(q + 1), e = be64(q + 9), bo = be64(q + 17);
                uint32_t cnt = be32(q + 25), plen = be32(q + 29);
                if (q[0] == BATCH_MAGIC && s >= 0 && bo >= 0 && cnt >= 1 && (uint64_t)bo + cnt < ((uint64_t)1 << 63) &&
                    (uint64_t)plen == (uint64_t)length - BATCH_SIZE) {
                    kind = KIND_BATCH;
                    sid = s;
                    epoch = e;
                    bbase = bo;
                    bcount = cnt;
                }
            }
        }
        if (i64s_grow(rows, ROW) < 0)
            return -1;
        int64_t *r = rows->v + rows->len;
        r[0] = o;
        r[1] = body_pos;
        r[2] = length;
        r[3] = kind;
        r[4] = sid;
        r[5] = epoch;
        r[6] = bbase;
        r[7] = bcount;
        rows->len += ROW;
        count++;
        pos = body_pos + (Py_ssize_t)length;
    }
}

static PyObject *py_decode_records(PyObject *self, PyObject *args)
{
    Py_buffer b;
    long long base, lap_end, align;
    Py_ssize_t start, end, max_records;
    int batches;
    if (!PyArg_ParseTuple(args, "y*LnnLLnp", &b, &base, &start, &end, &lap_end, &align, &max_records, &batches))
        return NULL;
    if (end < 0 || end > b.len)
        end = b.len;
    if (start < 0 || start > end) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "start must lie in [0, end]");
        return NULL;
    }
    I64s rows = {NULL, 0, 0};
    Stop st = {R_END, start, 0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_loop(b.buf, start, end, base, lap_end, align, max_records, batches, &rows, &st);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (rc < 0) {
        free(rows.v);
        return PyErr_NoMemory();
    }
    Py_ssize_t count = rows.len / ROW;
    PyObject *data = i64s_bytes(&rows);
    if (data == NULL)
        return NULL;
    return Py_BuildValue("NninLL", data, count, st.reason, st.pos, (long long)st.expected, (long long)st.found);
}

/* ---- pack_records ----
 * Packs bodies[index:] back to back into buf[pos:limit] as records (header + body), the first
 * at logical offset `offset`, until the next one would pass `limit`. batch = None: each body
 * is a record body as is; batch = (stream_id, epoch, base_offset): each body is a payload and
 * gets a StreamRecordBatch header (count 1, baseOffset base_offset + i). Returns (count, pos). */

static PyObject *py_pack_records(PyObject *self, PyObject *args)
{
    Py_buffer out;
    Py_ssize_t pos, limit, index;
    long long offset;
    PyObject *bodies, *batch;
    if (!PyArg_ParseTuple(args, "w*nnLOnO", &out, &pos, &limit, &offset, &bodies, &index, &batch))
        return NULL;
    long long sid = 0, epoch = 0, bbase = 0;
    int with_batch = batch != Py_None;
    if (with_batch && !PyArg_ParseTuple(batch, "LLL", &sid, &epoch, &bbase)) {
        PyBuffer_Release(&out);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(bodies, "bodies must be a sequence");
    if (seq == NULL) {
        PyBuffer_Release(&out);
        return NULL;
    }
    if (limit > out.len)
        limit = out.len;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i = index < 0 ? 0 : index, done = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint8_t *dst = out.buf;
    int64_t o = offset;
    int fail = 0;
    for (; i < n; i++) {
        Py_buffer body;
        if (PyObject_GetBuffer(items[i], &body, PyBUF_SIMPLE) < 0) {
            fail = 1;
            break;
        }
        Py_ssize_t head = with_batch ? BATCH_SIZE : 0;
        Py_ssize_t body_len = head + body.len;
        if (body_len == 0 || body_len > (Py_ssize_t)0xFFFFFFFFu) {
            PyBuffer_Release(&body);
            PyErr_Format(PyExc_ValueError, "record body of %zd bytes out of bounds (1 .. 2^32 - 1)", body_len);
            fail = 1;
            break;
        }
        if (pos < 0 || REC_SIZE + body_len > limit - pos) {
            PyBuffer_Release(&body);
            break;
        }
        uint8_t *h = dst + pos, *q = h + REC_SIZE;
        uint32_t crc = 0;
        if (with_batch) {
            q[0] = BATCH_MAGIC;
            put64(q + 1, sid);
            put64(q + 9, epoch);
            put64(q + 17, bbase + done);
            put32(q + 25, 1);
            put32(q + 29, (uint32_t)body.len);
            crc = crc32c_fn(0, q, BATCH_SIZE);
        }
        memcpy(q + head, body.buf, (size_t)body.len);
        crc = crc32c_fn(crc, q + head, (size_t)body.len);
        PyBuffer_Release(&body);
        put32(h, DATA_MAGIC);
        put32(h + 4, (uint32_t)body_len);
        put64(h + 8, o + REC_SIZE);
        put32(h + 16, crc);
        put32(h + 20, crc32c_fn(0, h, REC_CRC_SPAN));
        pos += REC_SIZE + body_len;
        o += REC_SIZE + body_len;
        done++;
    }
    Py_DECREF(seq);
    PyBuffer_Release(&out);
    if (fail)
        return NULL;
    return Py_BuildValue("nn", done, pos);
}

/* ---- input framing ----
 * split_length_prefixed: the (payload position, length) of every complete record (4-byte
 * big-endian length + bytes) from start; next_pos is where the first incomplete one begins.
 * split_lines: (position, length without the newline) of every line ending in '\n'; next_pos
 * is right after the last newline. Both stop after max_records (< 0: no limit). */

static PyObject *spans_result(I64s *spans, Py_ssize_t next)
{
    Py_ssize_t count = spans->len / 2;
    PyObject *data = i64s_bytes(spans);
    if (data == NULL)
        return NULL;
    return Py_BuildValue("Nnn", data, count, next);
}

/* One complete record at pos, if there is one: its payload's (start, length) and where the next
 * record begins. The two framings differ only in this step. */
typedef int (*span_step)(const uint8_t *p, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t *start,
                         Py_ssize_t *len, Py_ssize_t *next);

static int length_prefixed_step(const uint8_t *p, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t *start,
                                Py_ssize_t *len, Py_ssize_t *next)
{
    if (end - pos < 4)
        return 0;
    uint32_t n = be32(p + pos);
    if ((Py_ssize_t)n > end - pos - 4)
        return 0;
    *start = pos + 4;
    *len = (Py_ssize_t)n;
    *next = pos + 4 + (Py_ssize_t)n;
    return 1;
}

static int line_step(const uint8_t *p, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t *start,
                     Py_ssize_t *len, Py_ssize_t *next)
{
    if (pos >= end)
        return 0;
    const uint8_t *nl = memchr(p + pos, '\n', (size_t)(end - pos));
    if (nl == NULL)
        return 0;
    Py_ssize_t at = nl - p;
    *start = pos;
    *len = at - pos;
    *next = at + 1;
    return 1;
}

/* (data, pos, max_records) -> (spans, count, next_pos), the spans found by ``step`` from pos. */
static PyObject *split_with(PyObject *args, span_step step)
{
    Py_buffer b;
    Py_ssize_t pos, max_records;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &pos, &max_records))
        return NULL;
    const uint8_t *p = b.buf;
    Py_ssize_t end = b.len, count = 0, start, len, next;
    I64s spans = {NULL, 0, 0};
    int nomem = 0;
    if (pos < 0)
        pos = 0;
    Py_BEGIN_ALLOW_THREADS
    while ((max_records < 0 || count < max_records) && step(p, end, pos, &start, &len, &next)) {
        if (i64s_grow(&spans, 2) < 0) {
            nomem = 1;
            break;
        }
        spans.v[spans.len++] = start;
        spans.v[spans.len++] = len;
        pos = next;
        count++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (nomem) {
        free(spans.v);
        return PyErr_NoMemory();
    }
    return spans_result(&spans, pos);
}

static PyObject *py_split_length_prefixed(PyObject *self, PyObject *args)
{
    return split_with(args, length_prefixed_step);
}

static PyObject *py_split_lines(PyObject *self, PyObject *args)
{
    return split_with(args, line_step);
}


/* ---- frame_pack: append's input framing and record packing in one pass (issue 31) ----
 * frame_pack(out, pos, limit, offset, src, start, end, lines, stream_id, epoch, base, max_records,
 *            max_payload, render)
 *   -> (count, out_pos, src_pos, payload_bytes, last_offset, acks, stop, next_len)
 * Finds records in src[start:end] (lines: each '\n'-ended line without its newline; else a 4-byte
 * big-endian length + payload) and packs each straight into out[pos:limit] as a WAL data record
 * carrying a StreamRecordBatch (stream_id, epoch, baseOffset base + i, count 1): the bytes
 * pack_records(..., batch=(stream_id, epoch, base)) writes for the same payloads, with no Python
 * object per record and the CRCs computed as the bytes are copied. It stops (stop) when the input
 * holds no complete record more (FP_INPUT), the next record does not fit before limit (FP_FULL),
 * its payload is over max_payload (FP_TOO_LARGE), or after max_records (FP_MAX). next_len: the
 * payload length of the record it stopped at when known (-1: not known, or none).
 * render: 0 no acknowledgement text; 1 each record's WAL offset on a line; 2 append's NDJSON
 * record line per record. last_offset: the WAL offset of the last record packed (-1: none). */

enum { FP_INPUT = 0, FP_FULL = 1, FP_TOO_LARGE = 2, FP_MAX = 3 };

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Text;

static int text_room(Text *t, Py_ssize_t more)
{
    if (t->len + more <= t->cap)
        return 0;
    Py_ssize_t cap = t->cap ? t->cap * 2 : 65536;
    while (cap < t->len + more)
        cap *= 2;
    char *p = realloc(t->p, (size_t)cap);
    if (p == NULL)
        return -1;
    t->p = p;
    t->cap = cap;
    return 0;
}

/* "00".."99": decimal digits two at a time (a division per two digits, not per digit) */
static const char DEC_PAIRS[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                   "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                   "8081828384858687888990919293949596979899";

/* the decimal digits of v, right-aligned in buf[0:20] (they start at buf + 20 - the count); the count */
static inline int dec_u64(char *buf, uint64_t v)
{
    char *p = buf + 20;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        p -= 2;
        memcpy(p, DEC_PAIRS + d, 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, DEC_PAIRS + v * 2, 2);
    } else {
        *--p = (char)('0' + v);
    }
    return (int)(buf + 20 - p);
}

/* decimal digits of v (>= 0) at t's end; the caller made room for 20 */
static inline void text_u64(Text *t, uint64_t v)
{
    char tmp[20];
    int n = dec_u64(tmp, v);
    memcpy(t->p + t->len, tmp + 20 - n, (size_t)n);
    t->len += n;
}

static inline void text_lit(Text *t, const char *s, Py_ssize_t n)
{
    memcpy(t->p + t->len, s, (size_t)n);
    t->len += n;
}

#define LIT(t, s) text_lit((t), (s), (Py_ssize_t)(sizeof(s) - 1))

#define PUT_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) += sizeof(s) - 1)

/* one acknowledgement line; room for it was made (<= 256 bytes). ``mid``: the text between the
 * offset and the base offset, ',"stream_id":<stream_id>,"base_offset":' (the same for a whole
 * call: rendered once). Each number is converted once (the offset and the base offset are
 * printed twice): a quarter of the time of a conversion per field, digit by digit. */
static void render_ack(Text *t, int render, int64_t o, const char *mid, int mid_len, int64_t b, Py_ssize_t n)
{
    char ob[20];
    int on = dec_u64(ob, (uint64_t)o);
    char *p = t->p + t->len;
    if (render == 1) {
        memcpy(p, ob + 20 - on, (size_t)on);
        p[on] = '\n';
        t->len += on + 1;
        return;
    }
    char bb[20], nb[20];
    int bn = dec_u64(bb, (uint64_t)b), nn = dec_u64(nb, (uint64_t)n);
    PUT_LIT(p, "{\"type\":\"record\",\"offset\":");
    memcpy(p, ob + 20 - on, (size_t)on);
    p += on;
    memcpy(p, mid, (size_t)mid_len);
    p += mid_len;
    memcpy(p, bb + 20 - bn, (size_t)bn);
    p += bn;
    PUT_LIT(p, ",\"count\":1,\"payload_bytes\":");
    memcpy(p, nb + 20 - nn, (size_t)nn);
    p += nn;
    PUT_LIT(p, ",\"wal_offset\":");
    memcpy(p, ob + 20 - on, (size_t)on);
    p += on;
    PUT_LIT(p, ",\"stream_offset\":");
    memcpy(p, bb + 20 - bn, (size_t)bn);
    p += bn;
    PUT_LIT(p, "}\n");
    t->len = p - t->p;
}

/* The appender thread's CPU time in frame_pack's loops (copy, CRC, headers, ack text), summed
 * over the calls of this process: append's summary shows it as feed_us.pack_c, the part of its
 * pack_cpu that is not the writer's Python (issue 31). Updated with the GIL held. */
static long long frame_pack_cpu_ns;

static long long thread_cpu_ns(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return 0;
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static PyObject *py_frame_pack_cpu_ns(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(frame_pack_cpu_ns);
}

/* frame_pack's and frame_read's shared pieces. ack_mid: the NDJSON acknowledgement's middle,
 * ,"stream_id":<sid>,"base_offset": (render_ack's ``mid``), into ``mid`` (64 bytes); its length. */
static int ack_mid(char *mid, long long sid)
{
    char sb[20];
    int sn = dec_u64(sb, (uint64_t)sid);
    char *m = mid;
    PUT_LIT(m, ",\"stream_id\":");
    memcpy(m, sb + 20 - sn, (size_t)sn);
    m += sn;
    PUT_LIT(m, ",\"base_offset\":");
    return (int)(m - mid);
}

/* A StreamRecordBatch header at ``q``: count 1, ``plen`` bytes of payload after it. */
static inline void put_batch_header(uint8_t *q, long long sid, long long epoch, int64_t b, Py_ssize_t plen)
{
    q[0] = BATCH_MAGIC;
    put64(q + 1, sid);
    put64(q + 9, epoch);
    put64(q + 17, b);
    put32(q + 25, 1);
    put32(q + 29, (uint32_t)plen);
}

/* A data record's header at ``h`` (logical offset ``o``): its body's length and CRC, then its own CRC. */
static inline void put_record_header(uint8_t *h, Py_ssize_t body_len, int64_t o, uint32_t crc)
{
    put32(h, DATA_MAGIC);
    put32(h + 4, (uint32_t)body_len);
    put64(h + 8, o + REC_SIZE);
    put32(h + 16, crc);
    put32(h + 20, crc20_fn(h));
}

/* Their result tuple (count, out_pos, src_pos, payload, last, acks, stop, next_len); the ack text
 * (``render``) becomes bytes, else None; frees it; MemoryError if rendering ran out (``nomem``). */
static PyObject *frame_result(Text *acks, int render, int nomem, Py_ssize_t count, Py_ssize_t pos,
                              long long src_pos, long long payload_bytes, int64_t last, int stop,
                              Py_ssize_t next_len)
{
    if (nomem) {
        free(acks->p);
        return PyErr_NoMemory();
    }
    PyObject *text;
    if (render) {
        text = PyBytes_FromStringAndSize(acks->p ? acks->p : "", acks->len);
        free(acks->p);
        if (text == NULL)
            return NULL;
    } else {
        text = Py_NewRef(Py_None);
    }
    return Py_BuildValue("nnLLLNin", count, pos, src_pos, payload_bytes, (long long)last, text, stop, next_len);
}

static PyObject *py_frame_pack(PyObject *self, PyObject *args)
{
    Py_buffer out, src;
    Py_ssize_t pos, limit, start, end, max_records, max_payload;
    long long offset, sid, epoch, base;
    int lines, render;
    if (!PyArg_ParseTuple(args, "w*nnLy*nnpLLLnni", &out, &pos, &limit, &offset, &src, &start, &end, &lines, &sid,
                          &epoch, &base, &max_records, &max_payload, &render))
        return NULL;
    if (limit > out.len)
        limit = out.len;
    if (end > src.len)
        end = src.len;
    if (start < 0)
        start = 0;
    const uint8_t *in = src.buf;
    uint8_t *dst = out.buf;
    Py_ssize_t count = 0, next_len = -1;
    int64_t o = offset, last = -1;
    long long payload_bytes = 0;
    int stop = FP_INPUT, nomem = 0;
    Text acks = {NULL, 0, 0};
    char mid[64]; /* ,"stream_id":<sid>,"base_offset": */
    int mid_len = ack_mid(mid, sid);
    long long cpu0 = thread_cpu_ns();
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        Py_ssize_t pstart, plen, next;
        if (lines) {
            if (start >= end)
                break;
            const uint8_t *nl = memchr(in + start, '\n', (size_t)(end - start));
            if (nl == NULL)
                break;
            pstart = start;
            plen = (nl - in) - start;
            next = (nl - in) + 1;
        } else {
            if (end - start < 4)
                break;
            plen = (Py_ssize_t)be32(in + start);
            if (plen > end - start - 4) {
                next_len = plen;
                break;
            }
            pstart = start + 4;
            next = pstart + plen;
        }
        if (max_records >= 0 && count >= max_records) {
            stop = FP_MAX; /* only once a record is there: input that ends here is no error */
            break;
        }
        if (plen > max_payload) {
            stop = FP_TOO_LARGE;
            next_len = plen;
            break;
        }
        Py_ssize_t body_len = BATCH_SIZE + plen;
        if (pos < 0 || REC_SIZE + body_len > limit - pos) {
            stop = FP_FULL;
            next_len = plen;
            break;
        }
        if (render && text_room(&acks, 256) < 0) {
            nomem = 1;
            break;
        }
        uint8_t *h = dst + pos, *q = h + REC_SIZE;
        int64_t b = base + count;
        put_batch_header(q, sid, epoch, b, plen);
        put_record_header(h, body_len, o, copy_crc_fn(crc33_fn(q), q + BATCH_SIZE, in + pstart, (size_t)plen));
        if (render)
            render_ack(&acks, render, o, mid, mid_len, b, plen);
        last = o;
        pos += REC_SIZE + body_len;
        o += REC_SIZE + body_len;
        payload_bytes += plen;
        start = next;
        count++;
    }
    Py_END_ALLOW_THREADS
    frame_pack_cpu_ns += thread_cpu_ns() - cpu0;
    PyBuffer_Release(&out);
    PyBuffer_Release(&src);
    return frame_result(&acks, render, nomem, count, pos, start, payload_bytes, last, stop, next_len);
}

/* ---- frame_read: frame_pack's records read from a regular file straight into the block (issue 31) ----
 * frame_read(out, pos, limit, offset, fd, start, end, min_payload, stream_id, epoch, base, max_records,
 *            max_payload, render) -> frame_pack's 8-tuple, src_pos being the file offset reached.
 * Length-prefixed records are read with pread at file offset ``start`` on: each payload lands at its
 * place in ``out`` (one preadv per record: the payload, then the next record's 4-byte length), and
 * its CRC is taken there (in the cache the kernel's copy just left it in): no read buffer, no second
 * copy. It packs records starting before ``end`` and stops as frame_pack does at FP_FULL and
 * FP_TOO_LARGE; everything else it hands back as FP_INPUT at the first record it did not pack (the
 * file's end, a short or failed read, max_records reached, a payload under ``min_payload``): the
 * caller reads on from there through its buffer, and that path decides what the input is (the
 * same records, stops and errors as if all of it had gone that way). */
static PyObject *py_frame_read(PyObject *self, PyObject *args)
{
    Py_buffer out;
    Py_ssize_t pos, limit, max_records, max_payload, min_payload;
    long long offset, sid, epoch, base, start, end;
    int fd, render;
    if (!PyArg_ParseTuple(args, "w*nnLiLLnLLLnni", &out, &pos, &limit, &offset, &fd, &start, &end, &min_payload, &sid,
                          &epoch, &base, &max_records, &max_payload, &render))
        return NULL;
    if (limit > out.len)
        limit = out.len;
    uint8_t *dst = out.buf;
    Py_ssize_t count = 0, next_len = -1;
    int64_t o = offset, last = -1;
    long long payload_bytes = 0;
    int stop = FP_INPUT, nomem = 0;
    Text acks = {NULL, 0, 0};
    char mid[64]; /* ,"stream_id":<sid>,"base_offset": */
    int mid_len = ack_mid(mid, sid);
    long long cpu0 = thread_cpu_ns();
    Py_BEGIN_ALLOW_THREADS
    uint8_t prefix[4];
    int have = 0; /* prefix holds the length of the record at ``start`` */
    while (start < end) {
        if (!have) {
            ssize_t got;
            do
                got = pread(fd, prefix, 4, (off_t)start);
            while (got < 0 && errno == EINTR);
            if (got != 4)
                break; /* the end, a short or failed read: the buffered path takes it from here */
        }
        have = 0;
        Py_ssize_t plen = (Py_ssize_t)be32(prefix);
        if (max_records >= 0 && count >= max_records)
            break; /* FP_MAX only once the record is known complete: the buffered path checks */
        if (plen > max_payload) {
            stop = FP_TOO_LARGE;
            next_len = plen;
            break;
        }
        Py_ssize_t body_len = BATCH_SIZE + plen;
        if (pos < 0 || REC_SIZE + body_len > limit - pos) {
            stop = FP_FULL;
            next_len = plen;
            break;
        }
        if (plen < min_payload)
            break;
        if (render && text_room(&acks, 256) < 0) {
            nomem = 1;
            break;
        }
        uint8_t *h = dst + pos, *q = h + REC_SIZE, *payload = q + BATCH_SIZE;
        /* the payload, and the next record's length after it, in one call */
        struct iovec iov[2] = {{payload, (size_t)plen}, {prefix, 4}};
        Py_ssize_t want = plen + 4, done = 0;
        while (done < want) {
            ssize_t got;
            if (done < plen) {
                iov[0].iov_base = payload + done;
                iov[0].iov_len = (size_t)(plen - done);
                got = preadv(fd, iov, 2, (off_t)(start + 4 + done));
            } else {
                got = pread(fd, prefix + (done - plen), (size_t)(want - done), (off_t)(start + 4 + done));
            }
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            done += got;
        }
        if (done < plen)
            break; /* the payload is cut short: not packed (the buffered path reads it again) */
        have = done == want;
        int64_t b = base + count;
        put_batch_header(q, sid, epoch, b, plen);
        put_record_header(h, body_len, o, crc32c_fn(crc33_fn(q), payload, (size_t)plen));
        if (render)
            render_ack(&acks, render, o, mid, mid_len, b, plen);
        last = o;
        pos += REC_SIZE + body_len;
        o += REC_SIZE + body_len;
        payload_bytes += plen;
        start += 4 + plen;
        count++;
        if (!have)
            break; /* the next length was cut short: the buffered path reads it again */
    }
    Py_END_ALLOW_THREADS
    frame_pack_cpu_ns += thread_cpu_ns() - cpu0;
    PyBuffer_Release(&out);
    return frame_result(&acks, render, nomem, count, pos, start, payload_bytes, last, stop, next_len);
}

/* ---- payload text for recover/read --payload hex|base64 (issue 31) ----
 * hex_lines(buf, spans, first, stop) / base64_lines(...): the payloads buf[pos:pos + len] of the
 * (pos, len) int64 pairs spans[first:stop] encoded, each followed by '\n', in one bytes object:
 * what bytes.hex() and base64.b64encode() give for each, without a Python call per payload. */

static const char HEX[] = "0123456789abcdef";
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* two output characters per table entry: hex per byte, base64 per 12 bits (filled at import) */
static char hex_pairs[256][2];
static char b64_pairs[4096][2];

static void text_tables_init(void)
{
    for (int i = 0; i < 256; i++) {
        hex_pairs[i][0] = HEX[i >> 4];
        hex_pairs[i][1] = HEX[i & 15];
    }
    for (int i = 0; i < 4096; i++) {
        b64_pairs[i][0] = B64[i >> 6];
        b64_pairs[i][1] = B64[i & 63];
    }
}

static void hex_into(char *o, const uint8_t *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        memcpy(o + 2 * i, hex_pairs[p[i]], 2);
}

static Py_ssize_t b64_into(char *o, const uint8_t *p, Py_ssize_t n)
{
    char *s = o;
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        memcpy(o, b64_pairs[v >> 12], 2);
        memcpy(o + 2, b64_pairs[v & 4095], 2);
        o += 4;
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = B64[(v >> 6) & 63];
        *o++ = '=';
    }
    return o - s;
}

static PyObject *encode_lines(PyObject *args, int base64)
{
    Py_buffer b, sp;
    Py_ssize_t first, stop;
    if (!PyArg_ParseTuple(args, "y*y*nn", &b, &sp, &first, &stop))
        return NULL;
    const int64_t *v = sp.buf;
    Py_ssize_t pairs = sp.len / (Py_ssize_t)(2 * sizeof(int64_t)), total = 0;
    if (first < 0)
        first = 0;
    if (stop > pairs)
        stop = pairs;
    for (Py_ssize_t i = first; i < stop; i++) {
        int64_t pos = v[2 * i], len = v[2 * i + 1];
        if (pos < 0 || len < 0 || pos + len > b.len) {
            PyBuffer_Release(&b);
            PyBuffer_Release(&sp);
            PyErr_Format(PyExc_ValueError, "span %zd (%lld, %lld) outside the buffer", i, (long long)pos,
                         (long long)len);
            return NULL;
        }
        total += (base64 ? (len + 2) / 3 * 4 : 2 * len) + 1;
    }
    PyObject *res = PyBytes_FromStringAndSize(NULL, total);
    if (res != NULL) {
        char *o = PyBytes_AS_STRING(res);
        const uint8_t *p = b.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = first; i < stop; i++) {
            int64_t pos = v[2 * i], len = v[2 * i + 1];
            if (base64) {
                o += b64_into(o, p + pos, (Py_ssize_t)len);
            } else {
                hex_into(o, p + pos, (Py_ssize_t)len);
                o += 2 * len;
            }
            *o++ = '\n';
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&b);
    PyBuffer_Release(&sp);
    return res;
}

static PyObject *py_hex_lines(PyObject *self, PyObject *args)
{
    return encode_lines(args, 0);
}

static PyObject *py_base64_lines(PyObject *self, PyObject *args)
{
    return encode_lines(args, 1);
}


/* ---- record_lines: recover --json's record lines with their payload, for a run of rows ----
 * record_lines(buf, rows, first, stop, mode) -> bytes | None
 * rows[first:stop] (ROW int64 each, decode_records' rows of intact StreamRecordBatch records): each
 * record's NDJSON line as recover renders it from its dict (json.dumps, separators (",", ":")),
 * "payload" last: mode 0 hex, 1 base64, 2 text (UTF-8, invalid bytes as \\xNN, JSON-escaped with
 * ensure_ascii: json_text_into). None when a row is not an intact batch (the caller then renders
 * record by record). */

/* The length of the valid UTF-8 sequence at p[0:n] (Python's strict decoder: no overlong form,
 * no surrogate, at most U+10FFFF), its code point in *cp; 0 when p[0] starts none. */
static int utf8_seq(const uint8_t *p, Py_ssize_t n, uint32_t *cp)
{
    uint8_t c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

static inline void text_u16(Text *t, uint32_t u)
{
    t->p[t->len++] = '\\';
    t->p[t->len++] = 'u';
    for (int s = 12; s >= 0; s -= 4)
        t->p[t->len++] = HEX[(u >> s) & 15];
}

/* json.dumps(p.decode("utf-8", "backslashreplace")) without its quotes (ensure_ascii): at most
 * 12 characters a byte (a 4-byte sequence becomes a 12-character surrogate pair). */
static void json_text_into(Text *t, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            t->p[t->len++] = (char)c;
            i++;
            continue;
        }
        uint32_t cp;
        int len = utf8_seq(p + i, n - i, &cp);
        if (len == 0) { /* an invalid byte: backslashreplace's \xNN, its backslash escaped by JSON */
            LIT(t, "\\\\x");
            t->p[t->len++] = HEX[c >> 4];
            t->p[t->len++] = HEX[c & 15];
            i++;
            continue;
        }
        i += len;
        switch (cp) {
        case '"': LIT(t, "\\\""); break;
        case '\\': LIT(t, "\\\\"); break;
        case '\n': LIT(t, "\\n"); break;
        case '\r': LIT(t, "\\r"); break;
        case '\t': LIT(t, "\\t"); break;
        case '\b': LIT(t, "\\b"); break;
        case '\f': LIT(t, "\\f"); break;
        default:
            if (cp < 0x10000) { /* json.dumps escapes all but ' '..'~' (0x7f too) */
                text_u16(t, cp);
            } else {
                cp -= 0x10000;
                text_u16(t, 0xD800 | (cp >> 10));
                text_u16(t, 0xDC00 | (cp & 0x3FF));
            }
        }
    }
}

static PyObject *py_record_lines(PyObject *self, PyObject *args)
{
    Py_buffer b, r;
    Py_ssize_t first, stop;
    int mode;
    if (!PyArg_ParseTuple(args, "y*y*nni", &b, &r, &first, &stop, &mode))
        return NULL;
    const int64_t *rows = r.buf;
    const uint8_t *p = b.buf;
    Py_ssize_t n = r.len / (Py_ssize_t)(ROW * sizeof(int64_t));
    if (first < 0)
        first = 0;
    if (stop > n)
        stop = n;
    Text t = {NULL, 0, 0};
    int bad = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = first; i < stop && !bad && !nomem; i++) {
        const int64_t *row = rows + i * ROW;
        int64_t pos = row[1] + BATCH_SIZE, len = row[2] - BATCH_SIZE;
        if (row[3] != KIND_BATCH || len < 0 || row[1] < 0 || pos + len > b.len) {
            bad = 1;
            break;
        }
        Py_ssize_t need = 256 + (mode == 0 ? 2 * len : mode == 1 ? (len + 2) / 3 * 4 : 12 * len);
        if (text_room(&t, need) < 0) {
            nomem = 1;
            break;
        }
        LIT(&t, "{\"type\":\"record\",\"offset\":");
        text_u64(&t, (uint64_t)row[0]);
        LIT(&t, ",\"stream_id\":");
        text_u64(&t, (uint64_t)row[4]);
        LIT(&t, ",\"base_offset\":");
        text_u64(&t, (uint64_t)row[6]);
        LIT(&t, ",\"count\":");
        text_u64(&t, (uint64_t)row[7]);
        LIT(&t, ",\"payload_bytes\":");
        text_u64(&t, (uint64_t)len);
        LIT(&t, ",\"wal_offset\":");
        text_u64(&t, (uint64_t)row[0]);
        LIT(&t, ",\"stream_offset\":");
        text_u64(&t, (uint64_t)row[6]);
        LIT(&t, ",\"payload\":\"");
        if (mode == 0) {
            hex_into(t.p + t.len, p + pos, (Py_ssize_t)len);
            t.len += 2 * len;
        } else if (mode == 1) {
            t.len += b64_into(t.p + t.len, p + pos, (Py_ssize_t)len);
        } else {
            json_text_into(&t, p + pos, (Py_ssize_t)len);
        }
        LIT(&t, "\"}\n");
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    PyBuffer_Release(&r);
    if (nomem || bad) {
        free(t.p);
        if (nomem)
            return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    PyObject *res = PyBytes_FromStringAndSize(t.p ? t.p : "", t.len);
    free(t.p);
    return res;
}

static PyObject *py_rows_summary(PyObject *self, PyObject *args); /* (at the end of the file) */
/* defined in the sections after the module table */
static PyObject *py_body_crcs(PyObject *self, PyObject *args);
static PyObject *py_crc32c_combine(PyObject *self, PyObject *args);
static PyObject *py_gather_crc_into(PyObject *self, PyObject *args);

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int: CRC-32C of data, continuing value."},
    {"decode_records", py_decode_records, METH_VARARGS,
     "decode_records(buf, base_offset, start, end, lap_end, align, max_records, batches)"
     " -> (rows, count, reason, pos, expected, found)"},
    {"pack_records", py_pack_records, METH_VARARGS,
     "pack_records(buf, pos, limit, offset, bodies, index, batch) -> (count, pos)"},
    {"split_length_prefixed", py_split_length_prefixed, METH_VARARGS,
     "split_length_prefixed(buf, start, max_records) -> (spans, count, next_pos)"},
    {"split_lines", py_split_lines, METH_VARARGS, "split_lines(buf, start, max_records) -> (spans, count, next_pos)"},
    {"rows_summary", py_rows_summary, METH_VARARGS,
     "rows_summary(rows, first, stop) -> (all_batch, one_stream, stream_id, follows, body_bytes)"},
    {"body_crcs", py_body_crcs, METH_VARARGS,
     "body_crcs(buf, rows, first, stop) -> bytes: the bodyCRC of each row's record header, native uint32s"},
    {"crc32c_combine", py_crc32c_combine, METH_VARARGS,
     "crc32c_combine(crc_a, crc_b, length_b) -> int: crc32c(A + B) from crc32c(A), crc32c(B) and len(B)"},
    {"gather_crc_into", py_gather_crc_into, METH_VARARGS,
     "gather_crc_into(dst, pos, buf, rows, first, stop, crc) -> (end, crc): the bodies of decoded rows [first, stop)"
     " written back to back into dst from pos (where they end), and crc (of the bytes"
     " before) extended over the bodies copied, from their record headers' bodyCRCs"},
    {"frame_pack", py_frame_pack, METH_VARARGS,
     "frame_pack(out, pos, limit, offset, src, start, end, lines, stream_id, epoch, base, max_records, max_payload,"
     " render) -> (count, out_pos, src_pos, payload_bytes, last_offset, acks, stop, next_len)"},
    {"frame_read", py_frame_read, METH_VARARGS,
     "frame_read(out, pos, limit, offset, fd, start, end, min_payload, stream_id, epoch, base, max_records, "
     "max_payload, render) -> frame_pack's tuple: length-prefixed records read from a file into out"},
    {"frame_pack_cpu_ns", py_frame_pack_cpu_ns, METH_NOARGS,
     "frame_pack_cpu_ns() -> int: the CPU nanoseconds of frame_pack's loops so far (the calling threads')"},
    {"hex_lines", py_hex_lines, METH_VARARGS,
     "hex_lines(buf, spans, first, stop) -> bytes: each span's bytes in hex, one per line"},
    {"base64_lines", py_base64_lines, METH_VARARGS,
     "base64_lines(buf, spans, first, stop) -> bytes: each span's bytes in base64, one per line"},
    {"record_lines", py_record_lines, METH_VARARGS,
     "record_lines(buf, rows, first, stop, mode) -> bytes | None: recover's NDJSON record lines with payloads"
     " (mode 0 hex, 1 base64, 2 text; None: a row that is not an intact batch)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "walctl.format._native", "walctl's per-record format loops in C (see bulk.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    crc_init_table();
    shift_init();
    text_tables_init();
    const char *impl = "slicing-by-8";
#ifdef WALCTL_HAVE_SSE42
    /* WALCTL_NATIVE_CRC=soft: the table-driven CRC even on a CPU with SSE4.2 (its tests) */
    const char *want = getenv("WALCTL_NATIVE_CRC");
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2") && !(want && strcmp(want, "soft") == 0)) {
        crc32c_fn = crc_sse42;
        copy_crc_fn = copy_crc_sse42;
        crc33_fn = crc33_sse42;
        crc20_fn = crc20_sse42;
        impl = "sse4.2";
    }
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "CRC_IMPL", impl) < 0 || PyModule_AddIntConstant(m, "ROW", ROW) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* ---- rows_summary: what recover's scan asks of a run of decode_records' rows (issue 19) ----
 *
 * rows[first:stop] (ROW int64 each, as decode_records returns them), in one pass:
 *   all_batch   every row's kind is KIND_BATCH;
 *   one_stream  every row has the first row's stream_id (returned as stream_id);
 *   follows     each row's base_offset is the row before's base_offset + count;
 *   body_bytes  the sum of the rows' body lengths.
 * The scan then counts a run of one stream's batches without a Python step per record. */

static PyObject *py_rows_summary(PyObject *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t first, stop;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &first, &stop))
        return NULL;
    Py_ssize_t count = b.len / (Py_ssize_t)(ROW * sizeof(int64_t));
    if (first < 0 || stop > count || first >= stop) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "rows_summary: rows [first, stop) must be a non-empty range of the rows");
        return NULL;
    }
    const uint8_t *p = b.buf;
    int all_batch = 1, one_stream = 1, follows = 1;
    int64_t row[ROW], sid = 0, next_base = 0;
    uint64_t body = 0; /* wraps as int64 (the Python twin: _wrap64) */
    for (Py_ssize_t i = first; i < stop; i++) {
        memcpy(row, p + (size_t)i * ROW * sizeof(int64_t), sizeof(row)); /* rows need not be 8-byte aligned */
        if (row[3] != KIND_BATCH)
            all_batch = 0;
        if (i == first)
            sid = row[4];
        else {
            if (row[4] != sid)
                one_stream = 0;
            if (row[6] != next_base)
                follows = 0;
        }
        next_base = (int64_t)((uint64_t)row[6] + (uint64_t)row[7]);
        body += (uint64_t)row[2];
    }
    PyBuffer_Release(&b);
    return Py_BuildValue("(NNLNL)", PyBool_FromLong(all_batch), PyBool_FromLong(one_stream), (long long)sid,
                         PyBool_FromLong(follows), (long long)(int64_t)body);
}
/* ---- upload: the bodies of decoded rows (walctl.pipeline.rowcopy has the Python twins) ----
 * rows: decode_records' rows (ROW int64s each) over buf; each row's body is buf[body_pos, +body_length)
 * and its record header the REC_SIZE bytes before it. Rows outside buf raise ValueError. */

static inline int64_t row_field(const uint8_t *rows, Py_ssize_t i, int field)
{
    int64_t v;
    memcpy(&v, rows + ((size_t)i * ROW + (size_t)field) * sizeof(int64_t), sizeof(v));
    return v;
}

/* 0, or -1 with ValueError set: [first, stop) not rows of r, or a row's record outside b.
 * *total: the bodies' bytes. */
static int rows_check(Py_buffer *b, Py_buffer *r, Py_ssize_t first, Py_ssize_t stop, Py_ssize_t *total)
{
    Py_ssize_t n = r->len / (Py_ssize_t)(ROW * sizeof(int64_t));
    if (first < 0 || stop < first || stop > n) {
        PyErr_SetString(PyExc_ValueError, "rows [first, stop) out of range");
        return -1;
    }
    *total = 0;
    for (Py_ssize_t i = first; i < stop; i++) {
        int64_t pos = row_field(r->buf, i, 1), len = row_field(r->buf, i, 2);
        if (pos < REC_SIZE || len < 0 || pos > b->len || len > b->len - pos) {
            PyErr_SetString(PyExc_ValueError, "a row's record lies outside the buffer");
            return -1;
        }
        *total += (Py_ssize_t)len;
    }
    return 0;
}

static PyObject *py_body_crcs(PyObject *self, PyObject *args)
{
    Py_buffer b, r;
    Py_ssize_t first, stop, total;
    if (!PyArg_ParseTuple(args, "y*y*nn", &b, &r, &first, &stop))
        return NULL;
    PyObject *out = NULL;
    if (rows_check(&b, &r, first, stop, &total) == 0) {
        out = PyBytes_FromStringAndSize(NULL, (stop - first) * (Py_ssize_t)sizeof(uint32_t));
        if (out != NULL) {
            const uint8_t *src = b.buf;
            uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
            for (Py_ssize_t i = first; i < stop; i++) {
                uint32_t crc = be32(src + row_field(r.buf, i, 1) - (REC_SIZE - 16)); /* bodyCRC: header byte 16 */
                memcpy(dst, &crc, sizeof(crc));
                dst += sizeof(crc);
            }
        }
    }
    PyBuffer_Release(&b);
    PyBuffer_Release(&r);
    return out;
}

/* ---- upload: a spooled object's data crc without a second pass over its bytes (issue 19) ----
 * crc32c_combine(crc_a, crc_b, length_b) -> int: crc32c(A + B) from crc32c(A), crc32c(B) and len(B)
 *   (zlib's crc32_combine for the Castagnoli polynomial; walctl.format.crc._crc32c_combine_py is its twin; crc32c_combine calls this one where the extension is built).
 * gather_crc_into(dst, pos, buf, rows, first, stop, crc) -> (end, crc): the rows' bodies copied back to
 *   back into dst from pos (where they end), and crc (the
 *   crc32c of some bytes X) extended to crc32c(X + the bodies copied) by combining each body's bodyCRC,
 *   read from its record header (the decoder checked it against the body): the bodies are read once.
 *   The powers x^(8 len) come from x8nmodp (the CRC section's table of x^(2^k)); the last length's is
 *   kept (records of one size cost one multiplication each). */

static PyObject *py_crc32c_combine(PyObject *self, PyObject *args)
{
    unsigned long long a, b;
    long long len;
    if (!PyArg_ParseTuple(args, "KKL", &a, &b, &len))
        return NULL;
    if (len < 0 || a > 0xFFFFFFFFull || b > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_ValueError, "crc32c_combine: crcs are 32-bit, the length >= 0");
        return NULL;
    }
    return PyLong_FromUnsignedLong(gf_multmodp(x8nmodp((uint64_t)len), (uint32_t)a) ^ (uint32_t)b);
}

static PyObject *py_gather_crc_into(PyObject *self, PyObject *args)
{
    Py_buffer d, b, r;
    Py_ssize_t pos, first, stop, total;
    unsigned long long crc_in;
    if (!PyArg_ParseTuple(args, "w*ny*y*nnK", &d, &pos, &b, &r, &first, &stop, &crc_in))
        return NULL;
    PyObject *out = NULL;
    if (crc_in > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_ValueError, "gather_crc_into: the crc is 32-bit");
    } else if (rows_check(&b, &r, first, stop, &total) == 0) {
        if (pos < 0 || pos > d.len || total > d.len - pos) {
            PyErr_SetString(PyExc_ValueError, "the bodies do not fit dst from pos");
        } else {
            uint8_t *dst = (uint8_t *)d.buf + pos;
            const uint8_t *src = b.buf, *rows = r.buf;
            uint32_t crc = (uint32_t)crc_in, op = 0;
            int64_t op_len = -1;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = first; i < stop; i++) {
                int64_t at = row_field(rows, i, 1), len = row_field(rows, i, 2);
                memcpy(dst, src + at, (size_t)len);
                dst += len;
                if (len != op_len) {
                    op = x8nmodp((uint64_t)len);
                    op_len = len;
                }
                crc = gf_multmodp(op, crc) ^ be32(src + at - (REC_SIZE - 16)); /* bodyCRC: header byte 16 */
            }
            Py_END_ALLOW_THREADS
            out = Py_BuildValue("(nk)", pos + total, (unsigned long)crc);
        }
    }
    PyBuffer_Release(&d);
    PyBuffer_Release(&b);
    PyBuffer_Release(&r);
    return out;
}
