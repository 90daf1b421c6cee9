/* simhash(data: bytes) -> int: the 64-bit simhash of UTF-8 text, exactly as
 * crawler.dedup.simhash.simhash_py computes it (see there for the rules), in one pass of C:
 * words are runs of [0-9_a-zA-Z] and non-ASCII bytes, ASCII letters lowered, at least two bytes
 * long; each distinct word's feature is the first 64 bits (h1) of MurmurHash3_x64_128 with
 * seed 0, distinct by that value; bit i of the result is set when more than half of the
 * features have it set.
 *
 * In Python the split and the set of a 100 KB page's words alone cost more than lxml's parse
 * of it; here the whole hash costs a fraction of that. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned char word_byte[256];  /* 0: separator, else the byte lowered */
static uint64_t spread[256];  /* bit k of a byte moved to byte lane k: eight counters in one add */

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v; /* little-endian hosts, as mmh3.hash_bytes' byte order assumes */
}

/* h1 of MurmurHash3_x64_128(key, len, seed 0), the public-domain reference algorithm. */
static uint64_t murmur3_h1(const unsigned char *key, size_t len) {
    const size_t nblocks = len / 16;
    uint64_t h1 = 0, h2 = 0;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = load64(key + i * 16), k2 = load64(key + i * 16 + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    const unsigned char *tail = key + nblocks * 16;
    uint64_t k1 = 0, k2 = 0;
    switch (len & 15) {
    case 15: k2 ^= ((uint64_t)tail[14]) << 48; /* fall through */
    case 14: k2 ^= ((uint64_t)tail[13]) << 40; /* fall through */
    case 13: k2 ^= ((uint64_t)tail[12]) << 32; /* fall through */
    case 12: k2 ^= ((uint64_t)tail[11]) << 24; /* fall through */
    case 11: k2 ^= ((uint64_t)tail[10]) << 16; /* fall through */
    case 10: k2 ^= ((uint64_t)tail[9]) << 8;   /* fall through */
    case 9:  k2 ^= ((uint64_t)tail[8]);
             k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2; /* fall through */
    case 8:  k1 ^= ((uint64_t)tail[7]) << 56; /* fall through */
    case 7:  k1 ^= ((uint64_t)tail[6]) << 48; /* fall through */
    case 6:  k1 ^= ((uint64_t)tail[5]) << 40; /* fall through */
    case 5:  k1 ^= ((uint64_t)tail[4]) << 32; /* fall through */
    case 4:  k1 ^= ((uint64_t)tail[3]) << 24; /* fall through */
    case 3:  k1 ^= ((uint64_t)tail[2]) << 16; /* fall through */
    case 2:  k1 ^= ((uint64_t)tail[1]) << 8;  /* fall through */
    case 1:  k1 ^= ((uint64_t)tail[0]);
             k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= (uint64_t)len; h2 ^= (uint64_t)len;
    h1 += h2; h2 += h1;
    h1 = fmix64(h1); h2 = fmix64(h2);
    h1 += h2;
    return h1;
}

/* An open-addressing set of the distinct features, grown as it fills (a page's distinct words
 * are far fewer than its bytes); 0 is kept apart, as the empty slot's mark. */
typedef struct {
    uint64_t *slots;
    size_t mask;
    size_t count;
    int has_zero;
} featureset;

static int featureset_put(uint64_t *slots, size_t mask, uint64_t h) {
    size_t i = (size_t)(fmix64(h) & mask);
    while (slots[i]) {
        if (slots[i] == h) return 0;
        i = (i + 1) & mask;
    }
    slots[i] = h;
    return 1;
}

/* 1: new, 0: there already, -1: out of memory. */
static int featureset_add(featureset *s, uint64_t h) {
    if (h == 0) {
        if (s->has_zero) return 0;
        s->has_zero = 1;
        return 1;
    }
    if (2 * (s->count + 1) > s->mask + 1) {
        size_t cap = 2 * (s->mask + 1);
        uint64_t *grown = calloc(cap, sizeof(uint64_t));
        if (!grown) return -1;
        for (size_t i = 0; i <= s->mask; i++)
            if (s->slots[i]) featureset_put(grown, cap - 1, s->slots[i]);
        free(s->slots);
        s->slots = grown;
        s->mask = cap - 1;
    }
    if (!featureset_put(s->slots, s->mask, h)) return 0;
    s->count++;
    return 1;
}

static void flush(uint64_t lanes[8], uint64_t ones[64]) {
    for (int j = 0; j < 8; j++) {
        for (int k = 0; k < 8; k++) ones[8 * j + k] += (lanes[j] >> (8 * k)) & 0xff;
        lanes[j] = 0;
    }
}

static PyObject *simhash(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *data = view.buf;
    size_t n = (size_t)view.len;
    featureset set = {calloc(1024, sizeof(uint64_t)), 1023, 0, 0};
    unsigned char *word = malloc(n ? n : 1);
    if (!set.slots || !word) {
        free(set.slots);
        free(word);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    uint64_t ones[64] = {0};
    /* Byte lane k of lanes[j] counts bit 8j+k over the last features, flushed to ones[] before
     * a lane can pass 255. */
    uint64_t lanes[8] = {0};
    size_t total = 0, len = 0, pending = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i <= n && !failed; i++) {
        unsigned char c = i < n ? word_byte[data[i]] : 0;
        if (c) {
            word[len++] = c;
            continue;
        }
        if (len > 1) {
            uint64_t h = murmur3_h1(word, len);
            int added = featureset_add(&set, h);
            if (added > 0) {
                total++;
                for (int j = 0; j < 8; j++) lanes[j] += spread[(h >> (8 * j)) & 0xff];
                if (++pending == 255) {
                    flush(lanes, ones);
                    pending = 0;
                }
            }
            failed = added < 0;
        }
        len = 0;
    }
    flush(lanes, ones);
    Py_END_ALLOW_THREADS
    free(set.slots);
    free(word);
    PyBuffer_Release(&view);
    if (failed) return PyErr_NoMemory();
    uint64_t out = 0;
    for (int b = 0; b < 64; b++)
        if (2 * ones[b] > total) out |= (uint64_t)1 << b;
    return PyLong_FromUnsignedLongLong(out);
}

static PyMethodDef methods[] = {
    {"simhash", simhash, METH_O, "64-bit simhash of UTF-8 bytes (see crawler.dedup.simhash)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_simhash", NULL, -1, methods};

PyMODINIT_FUNC PyInit__simhash(void) {
    for (int b = 0; b < 256; b++) {
        spread[b] = 0;
        for (int k = 0; k < 8; k++)
            if (b & (1 << k)) spread[b] |= (uint64_t)1 << (8 * k);
        unsigned char c = (unsigned char)b;
        if (c >= 'A' && c <= 'Z') word_byte[b] = (unsigned char)(c | 0x20);
        else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c >= 128) word_byte[b] = c;
        else word_byte[b] = 0;
    }
    return PyModule_Create(&module);
}
