/* adaptcoll's compiled progress path: the tree protocols' per-segment work in C.
 *
 * The same state machines as adaptcoll/protocols/bcast.py, reduce.py and allreduce.py (with
 * pieces.py's send queues and windowed receivers), for host memory, predefined ops on basic types:
 * posting, testing completions (MPI_Testsome over this engine's requests), forwarding a broadcast
 * segment to the children, folding a reduce segment, passing it up, the send and receive windows.
 * Python stays the control plane: it decides, plans, builds the trees, starts an operation here with
 * one call, and collects finished or failed operations (adaptcoll/runtime/compiled.py).
 *
 * One truth for what a protocol sends: every post goes through `post()`, which in a fake engine
 * (no MPI) appends (kind, peer, tag, bytes) to a log instead; tests/test_compiled.py drives a fake
 * engine and the Python protocols with the same completion order and compares the posts, for every
 * tree kind, 1-17 ranks and every root.
 *
 * Built at first use with the MPI library's own mpicc, loaded with ctypes (which releases the GIL
 * during each call); the engine's mutex makes it safe for several threads. An optional progress
 * thread (ac_engine_thread) sweeps the running operations while the program computes.
 *
 * The simulator runs these same state machines (adaptcoll/simulate/simcore.c includes this file with
 * AC_SIM defined and its own stand-ins for MPI): there post() hands each send or receive to the
 * simulated network, folds and copies charge simulated CPU time, and no segment memory is allocated.
 */
#ifndef AC_SIM
#include <mpi.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AC_ABI_VERSION 4
#define SWEEP_CHUNK 1024
#define AC_NOTICE 16 /* ac_call_run: an error notice is waiting */
#if defined(__linux__)
#define THREAD_CLOCK CLOCK_MONOTONIC
#else
#define THREAD_CLOCK CLOCK_REALTIME /* (macOS has no pthread_condattr_setclock) */
#endif

enum { OPK_BCAST = 0, OPK_REDUCE = 1, OPK_ALLREDUCE = 2 };
enum { RK_DOWN_SEND = 0, RK_PARENT_RECV = 1, RK_UP_SEND = 2, RK_CHILD_RECV = 3 };
enum { ST_RUNNING = 0, ST_DONE = 1, ST_FAILED = 2, ST_ABORTED = 3 };
enum { SYNC_FIRST = 0, SYNC_ALL = 1, SYNC_NONE = 2 };
enum { LOG_ISEND = 0, LOG_ISSEND = 1, LOG_IRECV = 2 };
enum { ERR_NONE = 0, ERR_SIZE = 1, ERR_MPI = 2, ERR_NOMEM = 3 };

typedef struct ac_engine ac_engine;
typedef struct ac_op ac_op;

typedef struct {
    ac_op *op;
    int link, kind, child, pos, peer, tag, into_target;
    int64_t want; /* bytes a receive expects; -1 for a send */
    char *buf;
} entry_t;

typedef struct {
    char *buf;
    int w, pool;
} qitem_t;

typedef struct {
    char *acc;
    int acc_w, acc_pool;
    char *target_in;
    qitem_t q[2];
    int nq;
    char **inputs; /* ordered mode: one slot per input (self, child 1, ...) */
    int next_k;
} seg_t;

typedef struct {
    int parent, nchild, n;
    int *children, *segs;
    int parts; /* Join: parts left; -1 once fired */
    /* per-child send queues (broadcast, Allreduce's way down) */
    int has_down, *dnext, *dinflight, dleft, dsync_below;
    unsigned char *dready;
    /* windowed receiver from the parent (broadcast, Allreduce's result) */
    int has_recv, rgated, rnext, rinflight, rleft;
    unsigned char *rallowed;
    /* reduce (also Allreduce's way up) */
    int has_reduce, inputs, lookahead, into_target0, in_place, reduce_done;
    seg_t *st;
    unsigned char *released, *uready;
    int low, nreleased, unext, uinflight, usync_below;
    int *cnext, *cinflight;
} link_t;

struct ac_op {
    ac_engine *eng;
    MPI_Comm comm;
    MPI_Datatype dtype;
    int kind, dcode, opcode, itemsize;
    int64_t count, seg_count;
    int tag_base, tag_space, send_window, recv_window, sync_mode, ordered;
    char *local, *target;
    int nlinks, links_left;
    link_t *links;
    int state, live, released_by_python, in_finished, fin_idx; /* fin_idx: its place on the finished list */
    int err_kind, err_peer, err_code;
    int64_t err_got, err_want;
    char **pool;
    int npool, cappool;
    int64_t seg_bytes;
    ac_op *next_live, *prev_live;
    /* from the prepared call it was started from (ac_call_start), for ac_op_wait */
    double budget;
    const intptr_t *notice;
};

struct ac_engine {
    int fake;
    MPI_Request *reqs;
    entry_t *ents;
    int n, cap, cursor; /* reqs and ents, `cap` each */
    int idx[SWEEP_CHUNK];
    MPI_Status sts[SWEEP_CHUNK];
    ac_op **finished;
    int nfin, capfin;
    int64_t events, sweeps;
    int64_t *log;
    int nlog, caplog;
    ac_op *live_ops;
    pthread_mutex_t mu;
    /* the progress thread (ac_engine_thread): sweeps while `thr_on` and requests are pending, pausing
     * `thr_sleep_ns` after each sweep that completed nothing; waits on `cv` while off, and looks again
     * every LOOK_EVERY pauses while nothing is pending or the program sweeps itself (no MPI call) */
    pthread_t thr;
    pthread_cond_t cv;
    int thr_started, thr_on, thr_stop;
    int in_wait; /* the program's own calls sweeping now (ac_op_wait, ac_progress): the thread leaves it to them */
    int64_t thr_sleep_ns;
};

#ifdef AC_SIM
/* the simulator's side (simcore.c): a post, a fold or copy of `nelem` elements, an operation done */
static void sim_post(ac_op *op, const entry_t *en, int is_recv, int synchronous, int64_t nelem);
static void sim_fold(int64_t nelem);
static void sim_op_done(ac_op *op);
static char sim_buffer_token; /* what a pool "buffer" is in the simulator: nothing is stored */
#define POOL_FREE(b) ((void)(b))
#else
#define POOL_FREE(b) free(b)
#endif

/* ---------------------------------------------------------------- small helpers */

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void seg_range(const ac_op *op, int s, int64_t *lo, int64_t *nelem) {
    int64_t l = (int64_t)s * op->seg_count;
    int64_t h = l + op->seg_count;
    if (h > op->count) h = op->count;
    *lo = l;
    *nelem = h - l;
}

static int seg_tag(const ac_op *op, int s) { return (int)(((int64_t)op->tag_base + s) % op->tag_space); }

static int sync_below(int mode, int window, int n) {
    return mode == SYNC_ALL ? n : mode == SYNC_FIRST ? window : 0;
}

static void fail_op(ac_op *op, int kind, int peer, int64_t got, int64_t want, int code);

static char *pool_take(ac_op *op) {
#ifdef AC_SIM
    (void)op;
    return &sim_buffer_token;
#endif
    if (op->npool) return op->pool[--op->npool];
    return (char *)malloc(op->seg_bytes ? (size_t)op->seg_bytes : 1);
}

static void pool_give(ac_op *op, char *buf) {
#ifdef AC_SIM
    (void)op, (void)buf;
    return;
#endif
    if (grow((void **)&op->pool, &op->cappool, op->npool + 1, sizeof(char *))) {
        free(buf);
        return;
    }
    op->pool[op->npool++] = buf;
}

/* ---------------------------------------------------------------- folds: out = lower op higher */

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_LAND, OP_LOR, OP_LXOR, OP_BAND, OP_BOR, OP_BXOR };
enum { D_I8, D_I16, D_I32, D_I64, D_U8, D_U16, D_U32, D_U64, D_F32, D_F64, D_BOOL };

/* The fold loops are short and hot: where a loop starts relative to a 64-byte line changed a 256 KiB
   fold's speed by 1.5x here (GCC; -falign-loops=64 made every build as fast as the best). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER) && !defined(__INTEL_LLVM_COMPILER)
#pragma GCC push_options
#pragma GCC optimize("align-loops=64")
#define AC_FOLD_ALIGNED 1
#endif

/* `back`: run from the last element down (see ac_fold_backward) */
#define LOOP(T, EXPR)                                                                  \
    do {                                                                               \
        T *o_ = (T *)out;                                                              \
        const T *l_ = (const T *)lower, *h_ = (const T *)higher;                       \
        if (back) {                                                                    \
            for (int64_t i = n - 1; i >= 0; i--) {                                     \
                T x = l_[i], y = h_[i];                                                \
                o_[i] = (EXPR);                                                        \
            }                                                                          \
        } else {                                                                       \
            for (int64_t i = 0; i < n; i++) {                                          \
                T x = l_[i], y = h_[i];                                                \
                o_[i] = (EXPR);                                                        \
            }                                                                          \
        }                                                                              \
    } while (0)

/* integers wrap as NumPy's do (unsigned arithmetic, no undefined overflow) */
#define INT_OPS(T, U)                                                                  \
    switch (opcode) {                                                                  \
    case OP_SUM: LOOP(T, (T)((U)x + (U)y)); return 0;                                  \
    case OP_PROD: LOOP(T, (T)((U)x * (U)y)); return 0;                                 \
    case OP_MAX: LOOP(T, x > y ? x : y); return 0;                                     \
    case OP_MIN: LOOP(T, x < y ? x : y); return 0;                                     \
    case OP_LAND: LOOP(T, (T)((x != 0) && (y != 0))); return 0;                        \
    case OP_LOR: LOOP(T, (T)((x != 0) || (y != 0))); return 0;                         \
    case OP_LXOR: LOOP(T, (T)((x != 0) != (y != 0))); return 0;                        \
    case OP_BAND: LOOP(T, (T)(x & y)); return 0;                                       \
    case OP_BOR: LOOP(T, (T)(x | y)); return 0;                                        \
    case OP_BXOR: LOOP(T, (T)(x ^ y)); return 0;                                       \
    }                                                                                  \
    return -1

/* NaN-propagating MAX/MIN, as numpy.maximum/minimum */
#define FLOAT_OPS(T)                                                                   \
    switch (opcode) {                                                                  \
    case OP_SUM: LOOP(T, x + y); return 0;                                             \
    case OP_PROD: LOOP(T, x * y); return 0;                                            \
    case OP_MAX: LOOP(T, (x != x || x > y) ? x : y); return 0;                         \
    case OP_MIN: LOOP(T, (x != x || x < y) ? x : y); return 0;                         \
    }                                                                                  \
    return -1

static int fold_i8(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(int8_t, uint8_t); }
static int fold_i16(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(int16_t, uint16_t); }
static int fold_i32(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(int32_t, uint32_t); }
static int fold_i64(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(int64_t, uint64_t); }
static int fold_u8(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(uint8_t, uint8_t); }
static int fold_u16(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(uint16_t, uint16_t); }
static int fold_u32(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(uint32_t, uint32_t); }
static int fold_u64(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { INT_OPS(uint64_t, uint64_t); }
static int fold_f32(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { FLOAT_OPS(float); }
static int fold_f64(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) { FLOAT_OPS(double); }
static int fold_bool(int opcode, char *out, const char *lower, const char *higher, int64_t n, int back) {
    switch (opcode) {
    case OP_LAND: case OP_BAND: LOOP(uint8_t, (uint8_t)((x != 0) && (y != 0))); return 0;
    case OP_LOR: case OP_BOR: LOOP(uint8_t, (uint8_t)((x != 0) || (y != 0))); return 0;
    case OP_LXOR: case OP_BXOR: LOOP(uint8_t, (uint8_t)((x != 0) != (y != 0))); return 0;
    }
    return -1;
}

/* Whether a fold of `nbytes` per operand should run from the last element down. A forward loop's
   store to out[i] and a later load from an input whose address agrees with it in the low 12 bits look
   dependent to the CPU ("4K aliasing"). That happens when out lies a little ahead of an input modulo
   4096 bytes, e.g. NumPy arrays allocated one after the other on the heap (16 bytes apart modulo 4096:
   the root's folds of a 16 MiB Reduce ran 2.6x slower, 13-14 ms against 7). Run backwards, those
   stores only match loads already done. Only for folds out of the caches (FOLD_BACK_MIN): in cache
   the penalty did not show and the reversed vector loop is slower. */
#define FOLD_NEAR 1024
#define FOLD_BACK_MIN (1 << 20)
static int ahead_of(const char *out, const char *in) {
    uintptr_t d = ((uintptr_t)out - (uintptr_t)in) & 4095;
    return d != 0 && d <= FOLD_NEAR;
}
int ac_fold_backward(const char *out, const char *lower, const char *higher, int64_t nbytes) {
    return nbytes >= FOLD_BACK_MIN && (ahead_of(out, lower) || ahead_of(out, higher)) && !ahead_of(lower, out) &&
           !ahead_of(higher, out);
}

static const int fold_itemsize[] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 1}; /* by D_* code */

/* out = lower op higher over n elements; out may alias lower or higher. -1: (dcode, opcode) not folded here. */
int ac_fold(int dcode, int opcode, char *out, const char *lower, const char *higher, int64_t n) {
    if (dcode < 0 || dcode > D_BOOL) return -1;
    int back = ac_fold_backward(out, lower, higher, n * fold_itemsize[dcode]);
    switch (dcode) {
    case D_I8: return fold_i8(opcode, out, lower, higher, n, back);
    case D_I16: return fold_i16(opcode, out, lower, higher, n, back);
    case D_I32: return fold_i32(opcode, out, lower, higher, n, back);
    case D_I64: return fold_i64(opcode, out, lower, higher, n, back);
    case D_U8: return fold_u8(opcode, out, lower, higher, n, back);
    case D_U16: return fold_u16(opcode, out, lower, higher, n, back);
    case D_U32: return fold_u32(opcode, out, lower, higher, n, back);
    case D_U64: return fold_u64(opcode, out, lower, higher, n, back);
    case D_F32: return fold_f32(opcode, out, lower, higher, n, back);
    case D_F64: return fold_f64(opcode, out, lower, higher, n, back);
    case D_BOOL: return fold_bool(opcode, out, lower, higher, n, back);
    }
    return -1;
}

#ifdef AC_FOLD_ALIGNED
#pragma GCC pop_options
#endif

static void fold(ac_op *op, char *out, const char *lower, const char *higher, int64_t nelem) {
#ifdef AC_SIM
    (void)op, (void)out, (void)lower, (void)higher;
    sim_fold(nelem);
    return;
#endif
    if (op->eng->fake) return; /* a fake engine's buffers hold nothing */
    ac_fold(op->dcode, op->opcode, out, lower, higher, nelem);
}

static void copy_bytes(ac_op *op, char *dst, const char *src, int64_t nbytes) {
#ifdef AC_SIM
    if (dst != src) sim_fold(nbytes / op->itemsize); /* as the simulated backend charges a copy */
    return;
#endif
    if (op->eng->fake || dst == src) return;
    memcpy(dst, src, (size_t)nbytes);
}

/* ---------------------------------------------------------------- posting */

static void post(ac_op *op, int li, int kind, int child, int pos, int peer, int tag, char *buf, int64_t nelem,
                 int synchronous, int into_target) {
    ac_engine *e = op->eng;
    if (op->state != ST_RUNNING) return;
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 64;
        MPI_Request *r = (MPI_Request *)realloc(e->reqs, (size_t)cap * sizeof(MPI_Request));
        if (r) e->reqs = r;
        entry_t *en2 = r ? (entry_t *)realloc(e->ents, (size_t)cap * sizeof(entry_t)) : NULL;
        if (!r || !en2) {
            fail_op(op, ERR_NOMEM, peer, 0, 0, 0);
            return;
        }
        e->ents = en2;
        e->cap = cap;
    }
    int is_recv = kind == RK_PARENT_RECV || kind == RK_CHILD_RECV;
    int64_t nbytes = nelem * op->itemsize;
#ifdef AC_SIM
    {
        entry_t sim_en = {op, li, kind, child, pos, peer, tag, into_target, is_recv ? nbytes : -1, buf};
        op->live++;
        sim_post(op, &sim_en, is_recv, synchronous, nelem);
        return;
    }
#endif
    MPI_Request req = MPI_REQUEST_NULL;
    if (e->fake) {
        if (grow((void **)&e->log, &e->caplog, e->nlog + 4, sizeof(int64_t)) == 0) {
            e->log[e->nlog++] = is_recv ? LOG_IRECV : synchronous ? LOG_ISSEND : LOG_ISEND;
            e->log[e->nlog++] = peer;
            e->log[e->nlog++] = tag;
            e->log[e->nlog++] = nbytes;
        }
    } else {
        int rc;
        if (is_recv)
            rc = MPI_Irecv(buf, (int)nelem, op->dtype, peer, tag, op->comm, &req);
        else if (synchronous)
            rc = MPI_Issend(buf, (int)nelem, op->dtype, peer, tag, op->comm, &req);
        else
            rc = MPI_Isend(buf, (int)nelem, op->dtype, peer, tag, op->comm, &req);
        if (rc != MPI_SUCCESS) {
            fail_op(op, ERR_MPI, peer, 0, 0, rc);
            return;
        }
    }
    e->reqs[e->n] = req;
    entry_t *en = &e->ents[e->n];
    en->op = op;
    en->link = li;
    en->kind = kind;
    en->child = child;
    en->pos = pos;
    en->peer = peer;
    en->tag = tag;
    en->want = is_recv ? nbytes : -1;
    en->buf = buf;
    en->into_target = into_target;
    e->n++;
    op->live++;
}

/* ---------------------------------------------------------------- joins and completion */

static void op_link_done(ac_op *op) {
    if (--op->links_left == 0 && op->state == ST_RUNNING) {
        op->state = ST_DONE;
#ifdef AC_SIM
        sim_op_done(op);
        return;
#endif
        ac_engine *e = op->eng;
        if (grow((void **)&e->finished, &e->capfin, e->nfin + 1, sizeof(ac_op *)) == 0) {
            op->fin_idx = e->nfin;
            e->finished[e->nfin++] = op;
            op->in_finished = 1;
        }
    }
}

static void part_done(ac_op *op, int li) {
    link_t *L = &op->links[li];
    if (--L->parts == 0) {
        L->parts = -1;
        op_link_done(op);
    }
}

static void join_start(ac_op *op, int li) {
    link_t *L = &op->links[li];
    if (L->parts == 0) {
        L->parts = -1;
        op_link_done(op);
    }
}

/* ---------------------------------------------------------------- per-child send queues (pieces.ChildSendQueues) */

static char *data_of(ac_op *op, int s) {
    int64_t lo, nelem;
    seg_range(op, s, &lo, &nelem);
    return (op->kind == OPK_BCAST ? op->local : op->target) + lo * op->itemsize;
}

static void down_pump(ac_op *op, int li, int i) {
    link_t *L = &op->links[li];
    int k = L->dnext[i], inflight = L->dinflight[i];
    int window = op->send_window, n = L->n, child = L->children[i];
    while (inflight < window && k < n && L->dready[k]) {
        int s = L->segs[k];
        int64_t lo, nelem;
        seg_range(op, s, &lo, &nelem);
        inflight++;
        post(op, li, RK_DOWN_SEND, i, k, child, seg_tag(op, s), data_of(op, s), nelem, k < L->dsync_below, 0);
        k++;
    }
    L->dinflight[i] = inflight;
    L->dnext[i] = k;
}

static void down_ready(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    if (!L->has_down) return;
    L->dready[pos] = 1;
    for (int i = 0; i < L->nchild; i++)
        if (L->dnext[i] == pos) down_pump(op, li, i);
}

static void down_all_ready(ac_op *op, int li) {
    link_t *L = &op->links[li];
    memset(L->dready, 1, (size_t)L->n);
    for (int i = 0; i < L->nchild; i++) down_pump(op, li, i);
}

static void down_sent(ac_op *op, int li, int i) {
    link_t *L = &op->links[li];
    L->dinflight[i]--;
    if (--L->dleft == 0)
        part_done(op, li);
    else
        down_pump(op, li, i);
}

/* ---------------------------------------------------------------- windowed receiver (pieces.WindowedReceiver) */

static void recv_pump(ac_op *op, int li) {
    link_t *L = &op->links[li];
    int pos = L->rnext, inflight = L->rinflight, n = L->n, window = op->recv_window;
    while (inflight < window && pos < n) {
        if (L->rgated && !L->rallowed[pos]) break;
        int s = L->segs[pos];
        int64_t lo, nelem;
        seg_range(op, s, &lo, &nelem);
        inflight++;
        post(op, li, RK_PARENT_RECV, -1, pos, L->parent, seg_tag(op, s), data_of(op, s), nelem, 0, 0);
        pos++;
    }
    L->rnext = pos;
    L->rinflight = inflight;
}

static void recv_allow(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    L->rallowed[pos] = 1;
    if (pos == L->rnext) recv_pump(op, li);
}

static void recv_arrived(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    L->rinflight--;
    L->rleft--;
    if (L->nchild) down_ready(op, li, pos); /* forward */
    if (L->rleft == 0)
        part_done(op, li);
    else
        recv_pump(op, li);
}

/* ---------------------------------------------------------------- reduce (reduce.Reduce) */

static void reduce_release(ac_op *op, int li, int pos);
static void up_pump(ac_op *op, int li);

static void child_pump(ac_op *op, int li, int i) {
    link_t *L = &op->links[li];
    int window = op->recv_window, inflight = L->cinflight[i], pos = L->cnext[i];
    int limit = L->low + L->lookahead;
    if (limit > L->n) limit = L->n;
    if (inflight >= window || pos >= limit) return;
    int into = i == 0 && L->into_target0;
    while (inflight < window && pos < limit) {
        int s = L->segs[pos];
        int64_t lo, nelem;
        seg_range(op, s, &lo, &nelem);
        char *buf = into ? op->target + lo * op->itemsize : pool_take(op);
        if (!buf) {
            fail_op(op, ERR_NOMEM, L->children[i], 0, 0, 0);
            return;
        }
        inflight++;
        post(op, li, RK_CHILD_RECV, i, pos, L->children[i], seg_tag(op, s), buf, nelem, 0, into);
        pos++;
    }
    L->cinflight[i] = inflight;
    L->cnext[i] = pos;
}

static void segment_reduced(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    if (L->parent < 0) {
        reduce_release(op, li, pos);
    } else {
        L->uready[pos] = 1;
        up_pump(op, li);
    }
}

static void fold_arrival(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    seg_t *st = &L->st[pos];
    int64_t lo, nelem;
    seg_range(op, L->segs[pos], &lo, &nelem);
    for (;;) {
        if (st->target_in) { /* the root's result buffer arrived: it becomes the accumulator */
            if (st->acc) st->q[st->nq++] = (qitem_t){st->acc, st->acc_w, 1};
            st->acc = st->target_in;
            st->acc_w = 1;
            st->acc_pool = 0;
            st->target_in = NULL;
        }
        if (st->nq && st->acc) {
            qitem_t it = st->q[--st->nq];
            fold(op, st->acc, it.buf, st->acc, nelem);
            st->acc_w += it.w;
            if (it.pool) pool_give(op, it.buf);
            continue;
        }
        if (st->acc_w == L->inputs) segment_reduced(op, li, pos);
        return;
    }
}

static void fold_ordered(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    seg_t *st = &L->st[pos];
    int64_t lo, nelem;
    seg_range(op, L->segs[pos], &lo, &nelem);
    while (st->acc) {
        char *x = st->inputs[st->next_k];
        if (!x) return;
        char *out;
        if (st->next_k == L->nchild && L->parent < 0)
            out = (L->in_place && st->next_k == 1) ? st->acc : op->target + lo * op->itemsize;
        else
            out = x;
        fold(op, out, st->acc, x, nelem);
        if (st->acc_pool) pool_give(op, st->acc);
        if (out != x) pool_give(op, x);
        st->acc = out;
        st->acc_pool = out == x;
        st->inputs[st->next_k] = NULL;
        st->next_k++;
        if (st->next_k == L->inputs) {
            segment_reduced(op, li, pos);
            return;
        }
    }
}

static void child_arrived(ac_op *op, int li, int i, int pos, char *buf, int is_target) {
    link_t *L = &op->links[li];
    L->cinflight[i]--;
    seg_t *st = &L->st[pos];
    if (op->ordered) {
        st->inputs[i + 1] = buf;
        fold_ordered(op, li, pos);
    } else {
        if (is_target)
            st->target_in = buf;
        else if (!st->acc) {
            st->acc = buf;
            st->acc_w = 1;
            st->acc_pool = 1;
        } else
            st->q[st->nq++] = (qitem_t){buf, 1, 1};
        fold_arrival(op, li, pos);
    }
    child_pump(op, li, i);
}

static void up_pump(ac_op *op, int li) {
    link_t *L = &op->links[li];
    int pos = L->unext, inflight = L->uinflight, n = L->n, window = op->send_window;
    while (inflight < window && pos < n && L->uready[pos]) {
        int s = L->segs[pos];
        int64_t lo, nelem;
        seg_range(op, s, &lo, &nelem);
        char *buf = L->st ? L->st[pos].acc : op->local + lo * op->itemsize;
        inflight++;
        post(op, li, RK_UP_SEND, -1, pos, L->parent, seg_tag(op, s), buf, nelem, pos < L->usync_below, 0);
        pos++;
    }
    L->unext = pos;
    L->uinflight = inflight;
}

static void up_sent(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    L->uinflight--;
    if (L->nchild) {
        seg_t *st = &L->st[pos];
        if (st->acc_pool) pool_give(op, st->acc);
        st->acc = NULL;
    }
    if (L->has_recv && L->rgated) recv_allow(op, li, pos); /* Allreduce: the result of pos may come now */
    reduce_release(op, li, pos);
    up_pump(op, li);
}

static void reduce_release(ac_op *op, int li, int pos) {
    link_t *L = &op->links[li];
    if (L->parent < 0 && op->kind == OPK_ALLREDUCE) down_ready(op, li, pos); /* on_final */
    L->released[pos] = 1;
    L->nreleased++;
    if (pos == L->low) {
        int low = L->low;
        while (low < L->n && L->released[low]) low++;
        L->low = low;
        for (int i = 0; i < L->nchild; i++) child_pump(op, li, i);
    }
    if (L->nreleased == L->n && !L->reduce_done) {
        L->reduce_done = 1;
        part_done(op, li);
    }
}

static void reduce_start(ac_op *op, int li) {
    link_t *L = &op->links[li];
    if (L->n == 0) {
        L->reduce_done = 1;
        part_done(op, li);
        return;
    }
    if (!L->nchild) {
        if (L->parent < 0) { /* a lone root: the result is the local contribution */
            for (int pos = 0; pos < L->n; pos++) {
                int64_t lo, nelem;
                seg_range(op, L->segs[pos], &lo, &nelem);
                if (!L->in_place)
                    copy_bytes(op, op->target + lo * op->itemsize, op->local + lo * op->itemsize,
                               nelem * op->itemsize);
                reduce_release(op, li, pos);
            }
        } else { /* a leaf sends straight from its contribution */
            memset(L->uready, 1, (size_t)L->n);
            up_pump(op, li);
        }
        return;
    }
    for (int pos = 0; pos < L->n; pos++) {
        seg_t *st = &L->st[pos];
        int64_t lo, nelem;
        seg_range(op, L->segs[pos], &lo, &nelem);
        if (op->ordered) {
            st->acc = op->local + lo * op->itemsize;
        } else if (L->in_place) {
            st->acc = op->target + lo * op->itemsize;
            st->acc_w = 1;
        } else {
            st->q[st->nq++] = (qitem_t){op->local + lo * op->itemsize, 1, 0};
        }
    }
    for (int i = 0; i < L->nchild; i++) child_pump(op, li, i);
}

/* ---------------------------------------------------------------- completions */

static void handle(ac_op *op, const entry_t *en) {
    switch (en->kind) {
    case RK_DOWN_SEND: down_sent(op, en->link, en->child); break;
    case RK_PARENT_RECV: recv_arrived(op, en->link, en->pos); break;
    case RK_UP_SEND: up_sent(op, en->link, en->pos); break;
    case RK_CHILD_RECV: child_arrived(op, en->link, en->child, en->pos, en->buf, en->into_target); break;
    }
}

static void op_free(ac_op *op) {
    ac_engine *e = op->eng;
    if (op->prev_live) op->prev_live->next_live = op->next_live; else e->live_ops = op->next_live;
    if (op->next_live) op->next_live->prev_live = op->prev_live;
    for (int li = 0; li < op->nlinks; li++) {
        link_t *L = &op->links[li];
        if (L->st) {
            for (int pos = 0; pos < L->n; pos++) {
                seg_t *st = &L->st[pos];
                if (st->acc && st->acc_pool) POOL_FREE(st->acc);
                for (int k = 0; k < st->nq; k++)
                    if (st->q[k].pool) POOL_FREE(st->q[k].buf);
                if (st->inputs) {
                    for (int k = 1; k < L->inputs; k++)
                        if (st->inputs[k]) POOL_FREE(st->inputs[k]);
                }
            }
        }
    }
    for (int k = 0; k < op->npool; k++) POOL_FREE(op->pool[k]);
    free(op->pool);
    free(op); /* the struct, its links and their arrays: one block (ac_start) */
}

static void maybe_free(ac_op *op) {
    if (op->released_by_python && op->live == 0 && !op->in_finished && op->state != ST_RUNNING) op_free(op);
}

static void cancel_receives(ac_op *op) {
    ac_engine *e = op->eng;
    if (e->fake) return;
    for (int i = 0; i < e->n; i++) {
        entry_t *en = &e->ents[i];
        if (en->op == op && en->want >= 0 && e->reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&e->reqs[i]);
    }
}

static void fail_op(ac_op *op, int kind, int peer, int64_t got, int64_t want, int code) {
    if (op->state != ST_RUNNING) return;
    op->state = ST_FAILED;
    op->err_kind = kind;
    op->err_peer = peer;
    op->err_got = got;
    op->err_want = want;
    op->err_code = code;
    cancel_receives(op);
    ac_engine *e = op->eng;
    if (grow((void **)&e->finished, &e->capfin, e->nfin + 1, sizeof(ac_op *)) == 0) {
        op->fin_idx = e->nfin;
        e->finished[e->nfin++] = op;
        op->in_finished = 1;
    }
}

/* A completed entry (already removed from the table): check a receive's size, then run its handler. */
static void complete(ac_engine *e, entry_t en, int64_t got, int err) {
    ac_op *op = en.op;
    op->live--;
    e->events++;
    if (op->state != ST_RUNNING) {
        if (en.kind == RK_CHILD_RECV && !en.into_target && en.buf) POOL_FREE(en.buf); /* a dropped pool buffer */
        maybe_free(op);
        return;
    }
    if (err != MPI_SUCCESS && en.want < 0) {
        fail_op(op, ERR_MPI, en.peer, 0, 0, err);
    } else if (en.want >= 0 && got != en.want) {
        if (en.kind == RK_CHILD_RECV && !en.into_target) POOL_FREE(en.buf);
        fail_op(op, ERR_SIZE, en.peer, got, en.want, 0);
    } else {
        handle(op, &en);
    }
}

/* One Testsome over (a chunk of) the live requests, then the handlers; returns the completions. */
static int sweep(ac_engine *e) {
    int n = e->n;
    if (n == 0) return 0;
    int base = 0, cnt = n;
    if (n > SWEEP_CHUNK) {
        base = e->cursor;
        if (base >= n) base = 0;
        cnt = n - base < SWEEP_CHUNK ? n - base : SWEEP_CHUNK;
        e->cursor = base + cnt;
    }
    int outcount = 0;
    int rc = MPI_Testsome(cnt, e->reqs + base, &outcount, e->idx, e->sts);
    e->sweeps++;
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        /* the whole call failed: fail every operation with a request in this chunk */
        for (int i = base; i < base + cnt; i++) fail_op(e->ents[i].op, ERR_MPI, e->ents[i].peer, 0, 0, rc);
        return 0;
    }
    if (outcount == MPI_UNDEFINED || outcount <= 0) return 0;
    entry_t done[SWEEP_CHUNK];
    int64_t got[SWEEP_CHUNK];
    int errs[SWEEP_CHUNK];
    for (int j = 0; j < outcount; j++) {
        int i = base + e->idx[j];
        done[j] = e->ents[i];
        errs[j] = rc == MPI_ERR_IN_STATUS ? e->sts[j].MPI_ERROR : MPI_SUCCESS;
        got[j] = -1;
        if (done[j].want >= 0) {
            int cancelled = 0;
            MPI_Test_cancelled(&e->sts[j], &cancelled);
            if (cancelled) {
                got[j] = -2;
            } else if (errs[j] == MPI_SUCCESS) {
                int c = 0;
                MPI_Get_count(&e->sts[j], MPI_BYTE, &c);
                got[j] = c == MPI_UNDEFINED ? -1 : c;
            }
        }
    }
    /* swap the completed ones out, highest index first */
    int sorted[SWEEP_CHUNK];
    for (int j = 0; j < outcount; j++) sorted[j] = e->idx[j];
    for (int a = 1; a < outcount; a++) { /* insertion sort, descending */
        int v = sorted[a], b = a - 1;
        while (b >= 0 && sorted[b] < v) {
            sorted[b + 1] = sorted[b];
            b--;
        }
        sorted[b + 1] = v;
    }
    for (int j = 0; j < outcount; j++) {
        int i = base + sorted[j];
        int last = e->n - 1;
        if (i < last) {
            e->reqs[i] = e->reqs[last];
            e->ents[i] = e->ents[last];
        }
        e->n--;
    }
    for (int j = 0; j < outcount; j++) {
        if (got[j] == -2) { /* cancelled: its operation has failed, nothing arrived */
            ac_op *op = done[j].op;
            op->live--;
            if (done[j].kind == RK_CHILD_RECV && !done[j].into_target) POOL_FREE(done[j].buf);
            maybe_free(op);
            continue;
        }
        complete(e, done[j], got[j], errs[j]);
    }
    return outcount;
}

/* ---------------------------------------------------------------- the API Python calls (ctypes) */

int ac_abi_version(void) { return AC_ABI_VERSION; }
int ac_sizeof_comm(void) { return (int)sizeof(MPI_Comm); }

/* MPI_Comm_rank of a communicator handle mpi4py gave (-1 on error): proves handles and library match. */
int ac_comm_rank(intptr_t comm) {
    int rank = -1;
    if (MPI_Comm_rank((MPI_Comm)comm, &rank) != MPI_SUCCESS) return -1;
    return rank;
}

/* What the header this was compiled against says about its library (compared with what mpi4py loaded). */
const char *ac_mpi_header(void) {
#if defined(OPEN_MPI)
    return "Open MPI";
#elif defined(MPICH_VERSION)
    return "MPICH " MPICH_VERSION;
#elif defined(MPICH)
    return "MPICH";
#else
    return "unknown";
#endif
}

ac_engine *ac_engine_new(int fake) {
    ac_engine *e = (ac_engine *)calloc(1, sizeof(ac_engine));
    if (!e) return NULL;
    e->fake = fake;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
#if defined(__linux__)
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* the thread's timed waits ignore wall-clock steps */
#endif
    pthread_cond_init(&e->cv, &attr);
    pthread_condattr_destroy(&attr);
    return e;
}

/* The progress thread: MPI calls only while it is on and requests are pending, so that once the
 * program has completed its operations (as MPI requires before MPI_Finalize) it makes none. While
 * nothing is pending, or the program sweeps itself (in_wait: ac_op_wait, ac_progress), it looks again
 * every LOOK_EVERY pauses rather than being woken by each start: a program that starts small operation
 * after operation pays no wake-up (two context switches) per call, and one that waits at once leaves
 * the sweeping to its own wait. */
#define LOOK_EVERY 5
static void *progress_main(void *arg) {
    ac_engine *e = (ac_engine *)arg;
    pthread_mutex_lock(&e->mu);
    while (!e->thr_stop) {
        if (!e->thr_on) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        int64_t ns = e->thr_sleep_ns;
        if (e->n == 0 || e->in_wait) {
            struct timespec until;
            clock_gettime(THREAD_CLOCK, &until);
            int64_t t = (int64_t)until.tv_nsec + LOOK_EVERY * (ns > 0 ? ns : 1000);
            until.tv_sec += (time_t)(t / 1000000000);
            until.tv_nsec = (long)(t % 1000000000);
            pthread_cond_timedwait(&e->cv, &e->mu, &until);
            continue;
        }
        int moved = sweep(e);
        pthread_mutex_unlock(&e->mu); /* let the program's own calls in between sweeps */
        if (moved > 0) {
            sched_yield();
        } else {
            struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Turn the progress thread on (started at the first call) or off (it waits, making no MPI call);
 * `sleep_ns`: its pause after a sweep that completed nothing. `stop`: end it and join it (before
 * MPI_Finalize). Returns 0, or -1 if the thread could not be started (a fake engine has none). */
int ac_engine_thread(ac_engine *e, int on, int64_t sleep_ns, int stop) {
    if (e->fake) return on && !stop ? -1 : 0;
    pthread_mutex_lock(&e->mu);
    if (stop) {
        int started = e->thr_started;
        e->thr_stop = 1;
        e->thr_on = 0;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        if (started) pthread_join(e->thr, NULL);
        pthread_mutex_lock(&e->mu);
        e->thr_started = 0;
        e->thr_stop = 0;
        pthread_mutex_unlock(&e->mu);
        return 0;
    }
    e->thr_on = on;
    e->thr_sleep_ns = sleep_ns > 0 ? sleep_ns : 0;
    int rc = 0;
    if (on && !e->thr_started) {
        if (pthread_create(&e->thr, NULL, progress_main, e) == 0)
            e->thr_started = 1;
        else {
            e->thr_on = 0;
            rc = -1;
        }
    }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* One operation's memory in one block (its struct, links, per-link arrays and segment states): a
 * small call's start then makes one allocation instead of seven or more (about 2,000 instructions of
 * malloc / free a call, bench/RESULTS.md "Calls into C without ctypes"). */
#define AC_ALIGN(x) (((x) + (size_t)15) & ~(size_t)15)

static size_t op_block_size(int kind, int ordered, const int32_t *links) {
    int nl = links[0];
    size_t size = AC_ALIGN(sizeof(ac_op)) + AC_ALIGN((size_t)(nl > 0 ? nl : 1) * sizeof(link_t));
    const int32_t *p = links + 1;
    for (int li = 0; li < nl; li++) {
        p++; /* parent */
        size_t nc = (size_t)*p++;
        p += nc;
        size_t n = (size_t)*p++;
        p += n;
        size += AC_ALIGN((nc + n + 1) * sizeof(int)) + AC_ALIGN((nc * 4 + 1) * sizeof(int));
        size += AC_ALIGN(n * 2 + 1) + AC_ALIGN(n + 1) + AC_ALIGN(n + 1);
        if (kind != OPK_BCAST && nc && n) {
            size += AC_ALIGN(n * sizeof(seg_t));
            if (ordered) size += AC_ALIGN(n * (nc + 1) * sizeof(char *));
        }
    }
    return size;
}

/* The next `bytes` of the block at *at (zeroed: the block is calloc'd). */
static void *carve(char **at, size_t bytes) {
    void *out = *at;
    *at += AC_ALIGN(bytes);
    return out;
}

/* Start one operation on this rank. `links`: [nlinks, then per link: parent (-1: none), nchild,
 * children..., nseg, segment indices...]. Returns the operation (0: out of memory). */
intptr_t ac_start(ac_engine *e, int kind, intptr_t comm, intptr_t dtype, int dcode, int opcode, int itemsize,
                  int64_t count, int64_t seg_count, int tag_base, int tag_space, int send_window, int recv_window,
                  int sync_mode, int ordered, char *local, char *target, const int32_t *links) {
    char *block = (char *)calloc(1, op_block_size(kind, ordered, links));
    if (!block) return 0;
    char *at = block;
    ac_op *op = (ac_op *)carve(&at, sizeof(ac_op));
    op->eng = e;
    op->comm = (MPI_Comm)comm;
    op->dtype = (MPI_Datatype)dtype;
    op->kind = kind;
    op->dcode = dcode;
    op->opcode = opcode;
    op->itemsize = itemsize;
    op->count = count;
    op->seg_count = seg_count;
    op->tag_base = tag_base;
    op->tag_space = tag_space;
    op->send_window = send_window;
    op->recv_window = recv_window;
    op->sync_mode = sync_mode;
    op->ordered = ordered;
    op->local = local;
    op->target = target;
    op->seg_bytes = seg_count * itemsize;
    int nl = links[0];
    op->nlinks = op->links_left = nl;
    op->links = (link_t *)carve(&at, (size_t)(nl > 0 ? nl : 1) * sizeof(link_t));
    const int32_t *p = links + 1;
    for (int li = 0; li < nl; li++) {
        link_t *L = &op->links[li];
        L->parent = *p++;
        L->nchild = *p++;
        const int32_t *ch = p;
        p += L->nchild;
        L->n = *p++;
        const int32_t *sg = p;
        p += L->n;
        int nc = L->nchild, n = L->n;
        /* children and segs copied into one piece */
        L->children = (int *)carve(&at, ((size_t)nc + (size_t)n + 1) * sizeof(int));
        L->segs = L->children + nc;
        for (int i = 0; i < nc; i++) L->children[i] = ch[i];
        for (int i = 0; i < n; i++) L->segs[i] = sg[i];
        int has_parent = L->parent >= 0;
        /* per-child counters: dnext, dinflight, cnext, cinflight in one piece */
        L->dnext = (int *)carve(&at, ((size_t)nc * 4 + 1) * sizeof(int));
        L->dready = (unsigned char *)carve(&at, (size_t)n * 2 + 1); /* dready, uready */
        L->rallowed = (unsigned char *)carve(&at, (size_t)n + 1);
        L->released = (unsigned char *)carve(&at, (size_t)n + 1);
        L->dinflight = L->dnext + nc;
        L->cnext = L->dnext + 2 * nc;
        L->cinflight = L->dnext + 3 * nc;
        L->uready = L->dready + n;
        L->dsync_below = sync_below(sync_mode, send_window, n);
        L->usync_below = sync_below(sync_mode, send_window, n);
        L->lookahead = recv_window + send_window;
        L->inputs = nc + 1;
        if (kind == OPK_BCAST) {
            L->has_down = nc && n;
            L->has_recv = has_parent && n;
            L->parts = L->has_down + L->has_recv;
        } else {
            L->has_reduce = 1;
            L->in_place = !has_parent && target != NULL && local == target;
            L->into_target0 = !has_parent && !L->in_place && !ordered;
            if (kind == OPK_ALLREDUCE) {
                L->has_down = nc && n;
                L->has_recv = has_parent && n;
                L->rgated = 1;
                L->parts = 1 + L->has_down + L->has_recv;
            } else {
                L->parts = 1;
            }
            if (nc && n) {
                L->st = (seg_t *)carve(&at, (size_t)n * sizeof(seg_t));
                char **inputs = ordered ? (char **)carve(&at, (size_t)n * (size_t)L->inputs * sizeof(char *)) : NULL;
                for (int pos = 0; pos < n; pos++) {
                    L->st[pos].next_k = 1;
                    if (ordered) L->st[pos].inputs = inputs + (size_t)pos * (size_t)L->inputs;
                }
            }
        }
        L->dleft = n * nc;
        L->rleft = n;
    }
    if (!e->fake) pthread_mutex_lock(&e->mu);
    op->next_live = e->live_ops;
    if (e->live_ops) e->live_ops->prev_live = op;
    e->live_ops = op;
    if (nl == 0) {
        op->links_left = 1;
        op_link_done(op);
    }
    for (int li = 0; li < nl && op->state == ST_RUNNING; li++) {
        link_t *L = &op->links[li];
        if (kind == OPK_BCAST) {
            if (L->has_recv)
                recv_pump(op, li);
            else if (L->parent < 0 && L->has_down)
                down_all_ready(op, li);
            join_start(op, li);
        } else if (kind == OPK_REDUCE) {
            reduce_start(op, li);
        } else {
            if (L->has_recv) recv_pump(op, li); /* gated: posts nothing yet */
            reduce_start(op, li);
            join_start(op, li);
        }
    }
    if (!e->fake) pthread_mutex_unlock(&e->mu);
    return (intptr_t)op;
}

/* ---------------------------------------------------------------- prepared calls (one per prepared Python call) */

/* What ac_start needs of a call, fixed across its starts: Python makes one per prepared call (a
 * persistent request's too) and binds it to the engine and communicator once, so each start passes two
 * arguments through ctypes instead of eighteen (each argument costs ~0.13 us there). */
typedef struct {
    int kind, dcode, opcode, itemsize, send_window, recv_window, sync_mode, ordered;
    intptr_t dtype;
    int64_t count, seg_count;
    char *local, *target;
    int32_t *links;
    /* bound by ac_call_bind */
    ac_engine *eng;
    intptr_t comm;
    int tag_space;
    double budget;
    const intptr_t *notice; /* the transport's standing notice receive (its MPI handle; 0: none) */
    intptr_t last_op;
} ac_call;

intptr_t ac_call_new(int kind, intptr_t dtype, int dcode, int opcode, int itemsize, int64_t count, int64_t seg_count,
                     int send_window, int recv_window, int sync_mode, int ordered, char *local, char *target,
                     const int32_t *links, int nlinks_values) {
    ac_call *c = (ac_call *)calloc(1, sizeof(ac_call));
    if (!c) return 0;
    c->links = (int32_t *)malloc((size_t)(nlinks_values > 0 ? nlinks_values : 1) * sizeof(int32_t));
    if (!c->links) {
        free(c);
        return 0;
    }
    memcpy(c->links, links, (size_t)nlinks_values * sizeof(int32_t));
    c->kind = kind;
    c->dtype = dtype;
    c->dcode = dcode;
    c->opcode = opcode;
    c->itemsize = itemsize;
    c->count = count;
    c->seg_count = seg_count;
    c->send_window = send_window;
    c->recv_window = recv_window;
    c->sync_mode = sync_mode;
    c->ordered = ordered;
    c->local = local;
    c->target = target;
    return (intptr_t)c;
}

/* Bind a prepared call to the engine, the communicator its starts post on, its tag space, the
 * seconds of idle sweeping ac_call_run spends before it returns, and where the communicator's
 * standing receive for error notices keeps its MPI handle (NULL: none). */
void ac_call_bind(intptr_t call, ac_engine *e, intptr_t comm, int tag_space, double budget, const intptr_t *notice) {
    ac_call *c = (ac_call *)call;
    c->eng = e;
    c->comm = comm;
    c->tag_space = tag_space;
    c->budget = budget;
    c->notice = notice;
}

void ac_call_free(intptr_t call) {
    ac_call *c = (ac_call *)call;
    if (!c) return;
    free(c->links);
    free(c);
}

/* Start a bound call with this start's tag base; returns the operation (0: out of memory). */
intptr_t ac_call_start(intptr_t call, int tag_base) {
    const ac_call *c = (const ac_call *)call;
    intptr_t h = ac_start(c->eng, c->kind, c->comm, c->dtype, c->dcode, c->opcode, c->itemsize, c->count,
                          c->seg_count, tag_base, c->tag_space, c->send_window, c->recv_window, c->sync_mode,
                          c->ordered, c->local, c->target, c->links);
    if (h) {
        ((ac_op *)h)->budget = c->budget;
        ((ac_op *)h)->notice = c->notice;
    }
    return h;
}

/* Whether an error notice has arrived on the operation's communicator (the receive is left to Python). */
static int op_notice(const ac_op *op) {
    if (!op->notice || !*op->notice) return 0;
    int flag = 0;
    MPI_Request r = (MPI_Request)*op->notice;
    if (MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    return flag;
}

/* Wait for one operation started by ac_call_start: sweep (yielding the CPU after each idle sweep) until
 * it has finished, or its call's budget of seconds of idle sweeping has passed, or an error notice has
 * arrived. Returns its state: ST_DONE (freed here: Python must not release it), ST_FAILED (off the
 * finished list: Python reads ac_op_error, then ac_op_release), or ST_RUNNING; plus AC_NOTICE when an
 * error notice is waiting (Python receives it: the Python engine looks at notices on idle sweeps only,
 * which a wait that ends here never makes). Other operations that finish meanwhile stay on the finished
 * list for ac_take_finished. */
int ac_op_wait(intptr_t handle) {
    ac_op *op = (ac_op *)handle;
    ac_engine *e = op->eng;
    pthread_mutex_lock(&e->mu);
    e->in_wait++;
    double t0 = -1.0;
    while (op->state == ST_RUNNING) {
        if (sweep(e) > 0) continue;
        double now = MPI_Wtime();
        if (t0 < 0)
            t0 = now;
        else if (now - t0 > op->budget || op_notice(op))
            break;
        pthread_mutex_unlock(&e->mu);
        sched_yield();
        pthread_mutex_lock(&e->mu);
    }
    int state = op->state;
    if (state != ST_RUNNING && op->in_finished) { /* ours: off the finished list */
        ac_op *last = e->finished[--e->nfin]; /* O(1): many may wait there while each is waited for in turn */
        e->finished[op->fin_idx] = last;
        last->fin_idx = op->fin_idx;
        op->in_finished = 0;
    }
    int notice = op_notice(op);
    if (state == ST_DONE) {
        op->released_by_python = 1;
        maybe_free(op);
    }
    e->in_wait--;
    pthread_mutex_unlock(&e->mu);
    return notice ? state | AC_NOTICE : state;
}

/* The operation the last ac_call_run left running or failed (for ac_op_error, ac_op_release, adoption). */
intptr_t ac_call_last(intptr_t call) { return ((const ac_call *)call)->last_op; }

/* A blocking call's start and wait in one: start a bound call, then sweep (yielding the CPU after each
 * idle sweep) until it has finished, or `budget` seconds of idle sweeping have passed, or an error
 * notice has arrived. Returns its state: ST_DONE (freed here), ST_FAILED (ac_call_last: its handle,
 * for ac_op_error and ac_op_release), ST_RUNNING (still running: Python adopts ac_call_last as a
 * started operation), or -1 (out of memory); plus AC_NOTICE when an error notice is waiting (Python
 * receives it: the Python engine looks at notices on idle sweeps only, which a call that finishes
 * here never makes). Other operations that finish meanwhile stay on the finished list for
 * ac_take_finished. */
int ac_call_run(intptr_t call, int tag_base) {
    ac_call *c = (ac_call *)call;
    intptr_t h = ac_call_start(call, tag_base);
    c->last_op = h;
    if (!h) return -1;
    int state = ac_op_wait(h);
    if ((state & ~AC_NOTICE) == ST_DONE) c->last_op = 0;
    return state;
}

/* Sweep until an operation finishes, or `max_idle` sweeps in a row completed nothing (yielding the
 * CPU after each), or `max_sweeps` sweeps ran. Returns the finished operations waiting to be taken;
 * `*events`: the completions handled meanwhile. */
int ac_progress(ac_engine *e, int max_idle, int max_sweeps, int64_t *events) {
    pthread_mutex_lock(&e->mu);
    e->in_wait++;
    int idle = 0;
    int64_t before = e->events;
    for (int k = 0; k < max_sweeps && e->nfin == 0 && e->n > 0; k++) {
        if (sweep(e) > 0) {
            idle = 0;
            continue;
        }
        if (++idle >= max_idle) break;
        pthread_mutex_unlock(&e->mu);
        sched_yield();
        pthread_mutex_lock(&e->mu);
    }
    int nfin = e->nfin;
    *events = e->events - before;
    e->in_wait--;
    pthread_mutex_unlock(&e->mu);
    return nfin;
}

/* Take up to `max` finished operations: their handles and states (ST_DONE, ST_FAILED, or ST_ABORTED
 * for one Python failed itself). */
int ac_take_finished(ac_engine *e, intptr_t *ops, int *states, int max) {
    if (!e->fake) pthread_mutex_lock(&e->mu);
    int k = 0;
    while (k < max && e->nfin > 0) {
        ac_op *op = e->finished[--e->nfin];
        op->in_finished = 0;
        ops[k] = (intptr_t)op;
        states[k] = op->state;
        k++;
    }
    if (!e->fake) pthread_mutex_unlock(&e->mu);
    return k;
}

/* A failed operation's error: kind (ERR_*), peer, bytes got and expected, MPI error code. */
void ac_op_error(intptr_t handle, int *kind, int *peer, int64_t *got, int64_t *want, int *code) {
    ac_op *op = (ac_op *)handle;
    *kind = op->err_kind;
    *peer = op->err_peer;
    *got = op->err_got;
    *want = op->err_want;
    *code = op->err_code;
}

/* Python failed the operation (another rank's notice): stop it, cancel its receives. */
void ac_op_abort(intptr_t handle) {
    ac_op *op = (ac_op *)handle;
    ac_engine *e = op->eng;
    if (!e->fake) pthread_mutex_lock(&e->mu);
    if (op->state == ST_RUNNING) {
        op->state = ST_ABORTED;
        cancel_receives(op);
        if (grow((void **)&e->finished, &e->capfin, e->nfin + 1, sizeof(ac_op *)) == 0) {
            op->fin_idx = e->nfin;
            e->finished[e->nfin++] = op; /* handed back once more, so Python can let it go */
            op->in_finished = 1;
        }
    }
    if (!e->fake) pthread_mutex_unlock(&e->mu);
}

/* Python is done with the operation: free it once its last request has completed. */
void ac_op_release(intptr_t handle) {
    ac_op *op = (ac_op *)handle;
    ac_engine *e = op->eng;
    if (!e->fake) pthread_mutex_lock(&e->mu);
    op->released_by_python = 1;
    if (op->state == ST_RUNNING) {
        op->state = ST_ABORTED;
        cancel_receives(op);
    }
    maybe_free(op);
    if (!e->fake) pthread_mutex_unlock(&e->mu);
}

/* The watchdog's view: up to `max` pending requests of `handle` (0: every operation) as
 * (operation, is_receive, peer, tag, bytes expected) in `out` (5 values each). Returns the count. */
int ac_pending(ac_engine *e, intptr_t handle, int64_t *out, int max) {
    if (!e->fake) pthread_mutex_lock(&e->mu);
    int k = 0;
    for (int i = 0; i < e->n && k < max; i++) {
        entry_t *en = &e->ents[i];
        if ((handle && (intptr_t)en->op != handle) || en->op->state != ST_RUNNING) continue;
        out[5 * k] = (int64_t)(intptr_t)en->op;
        out[5 * k + 1] = en->want >= 0;
        out[5 * k + 2] = en->peer;
        out[5 * k + 3] = en->tag;
        out[5 * k + 4] = en->want;
        k++;
    }
    if (!e->fake) pthread_mutex_unlock(&e->mu);
    return k;
}

/* Counters: live requests (of running operations, and all), completions handled, sweeps made. */
void ac_counters(ac_engine *e, int64_t *out) {
    if (!e->fake) pthread_mutex_lock(&e->mu);
    int running = 0;
    for (int i = 0; i < e->n; i++) running += e->ents[i].op->state == ST_RUNNING;
    out[0] = running;
    out[1] = e->n;
    out[2] = e->events;
    out[3] = e->sweeps;
    if (!e->fake) pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- the fake engine (tests) */

/* Take the posts logged since the last call: 4 values each (LOG_* kind, peer, tag, bytes). */
int ac_fake_log(ac_engine *e, int64_t *out, int max) {
    int k = e->nlog / 4 < max ? e->nlog / 4 : max;
    memcpy(out, e->log, (size_t)k * 4 * sizeof(int64_t));
    memmove(e->log, e->log + 4 * k, (size_t)(e->nlog - 4 * k) * sizeof(int64_t));
    e->nlog -= 4 * k;
    return k;
}

/* Complete the pending request (is_receive, peer, tag) as if MPI had; 0 if found, -1 if not. */
int ac_fake_complete(ac_engine *e, int is_recv, int peer, int tag) {
    for (int i = 0; i < e->n; i++) {
        entry_t en = e->ents[i];
        if ((en.want >= 0) != (is_recv != 0) || en.peer != peer || en.tag != tag) continue;
        int last = e->n - 1;
        if (i < last) {
            e->reqs[i] = e->reqs[last];
            e->ents[i] = e->ents[last];
        }
        e->n--;
        complete(e, en, en.want, MPI_SUCCESS);
        return 0;
    }
    return -1;
}

/* The pending requests of a fake engine: 3 values each (is_receive, peer, tag). */
int ac_fake_pending(ac_engine *e, int64_t *out, int max) {
    int k = 0;
    for (int i = 0; i < e->n && k < max; i++) {
        out[3 * k] = e->ents[i].want >= 0;
        out[3 * k + 1] = e->ents[i].peer;
        out[3 * k + 2] = e->ents[i].tag;
        k++;
    }
    return k;
}

/* The plain C reference of bench/engine_cost.py: `n` messages of `nbytes` between ranks 0 and 1
 * (rank 0 sends, rank 1 receives), `window` in flight, Isend/Irecv/Testsome with sched_yield when
 * idle. Returns the seconds it took (MPI_Wtime), or -1 on an MPI error. */
double ac_pingpong_loop(intptr_t comm_handle, int n, int nbytes, int window) {
    MPI_Comm comm = (MPI_Comm)comm_handle;
    int rank;
    MPI_Comm_rank(comm, &rank);
    char *buf = (char *)calloc((size_t)window, (size_t)(nbytes > 0 ? nbytes : 1));
    MPI_Request *reqs = (MPI_Request *)malloc((size_t)window * sizeof(MPI_Request));
    int *idx = (int *)malloc((size_t)window * sizeof(int));
    if (!buf || !reqs || !idx) return -1;
    for (int i = 0; i < window; i++) reqs[i] = MPI_REQUEST_NULL;
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    int posted = 0, done = 0;
    while (done < n) {
        for (int i = 0; i < window && posted < n; i++) {
            if (reqs[i] != MPI_REQUEST_NULL) continue;
            if (rank == 0)
                MPI_Isend(buf + (size_t)i * nbytes, nbytes, MPI_BYTE, 1, posted % 32768, comm, &reqs[i]);
            else
                MPI_Irecv(buf + (size_t)i * nbytes, nbytes, MPI_BYTE, 0, posted % 32768, comm, &reqs[i]);
            posted++;
        }
        int out = 0;
        if (MPI_Testsome(window, reqs, &out, idx, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return -1;
        if (out == MPI_UNDEFINED || out == 0)
            sched_yield();
        else
            done += out;
    }
    double t = MPI_Wtime() - t0;
    free(buf);
    free(reqs);
    free(idx);
    return t;
}
