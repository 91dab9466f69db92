/* The simulator's event core in C, running the compiled engine's own tree protocols.
 *
 * The same discrete-event world as adaptcoll/simulate/world.py (CPUs, message matching, eager and
 * rendezvous transfers, shared-memory copies between ranks of a node) with network.py's fair links
 * (and the 'pair' order), FIFO links and pathlinks.py's described networks (max-min or bottleneck
 * sharing over routes Python made), event for event: every event takes its (time, sequence) key in the
 * same order as there, so a run gives the same times, messages, events and callbacks as the Python core
 * (tests/test_simcore.py and tests/test_simcore_paths.py compare them). The ranks run the tree protocols of
 * adaptcoll/runtime/progress.c, included here with AC_SIM: what the compiled engine runs over MPI; or
 * the lock-step baselines' steps, as lockstep.py's schedules write them.
 *
 * Detour noise comes as per-rank (CPU) and per-node (link) arrays of detours [start, end) drawn in
 * Python up to a horizon; a run that needs a detour beyond it says so (SIM_HORIZON) and Python runs
 * it again with a longer horizon. No MPI is needed: MPI's names below only let progress.c compile.
 * Built at first use with the C compiler and loaded with ctypes (adaptcoll/simulate/fastcore.py).
 */
#define AC_SIM 1
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- MPI's names, never called here */
typedef intptr_t MPI_Comm;
typedef intptr_t MPI_Datatype;
typedef intptr_t MPI_Request;
typedef struct {
    int MPI_ERROR;
} MPI_Status;
#define MPI_REQUEST_NULL 0
#define MPI_SUCCESS 0
#define MPI_ERR_IN_STATUS 17
#define MPI_UNDEFINED (-32766)
#define MPI_BYTE 1
#define MPI_STATUSES_IGNORE ((MPI_Status *)0)
#define MPI_STATUS_IGNORE ((MPI_Status *)0)
static inline int sim_no_mpi(void) { return 1; }
#define MPI_Irecv(...) sim_no_mpi()
#define MPI_Isend(...) sim_no_mpi()
#define MPI_Issend(...) sim_no_mpi()
#define MPI_Cancel(...) sim_no_mpi()
#define MPI_Testsome(...) sim_no_mpi()
#define MPI_Test_cancelled(...) sim_no_mpi()
#define MPI_Get_count(...) sim_no_mpi()
#define MPI_Comm_rank(...) sim_no_mpi()
#define MPI_Barrier(...) sim_no_mpi()
#define MPI_Request_get_status(...) sim_no_mpi()
#define MPI_Wtime() 0.0

#include "progress.c"

#define SIM_ABI 7
enum { SIM_OK = 0, SIM_DEADLOCK = 1, SIM_NOMEM = 2, SIM_SIZE = 3, SIM_HORIZON = 4, SIM_FAILED = 5, SIM_ROUTE = 6,
       SIM_NORATE = 7 };
enum { EV_START, EV_WAKE, EV_READY, EV_DEPART, EV_BEGIN, EV_ARRIVE, EV_EAGER_SENT, EV_LATE_RECV,
       EV_PAIR_NEXT, EV_LEAVE };

typedef struct {
    double t;
    int64_t seq;
    int type, a;
    int64_t b;
} ev_t;

typedef struct {
    /* what the fair links touch on every change of load, first: one cache line */
    double rem, rate, tupd, tfin;
    int64_t sq;
    int snode, dnode;
    int src, dst, tag, next;
    unsigned char eager, landed, has_recv, pending;
    int64_t n;
    double ts, tr, start, end;
    int se, re; /* the send's and the receive's entries (in W.ents): read only when they complete */
    /* described networks (pathlinks.PathLinks): the route, and max-min's state of the message */
    int route, bn, nbn;
    int64_t stamp, mark;
    double worst, nrate;
} msg_t;

typedef struct { /* an unmatched receive */
    int ei; /* its entry (in W.ents) */
    double tr;
    int next;
} recv_t;

typedef struct { /* a posted send's or receive's completion entry, kept apart from the hot message state */
    entry_t en;
    int next;
} ent_t;

typedef struct { /* links 'pair': a sender-receiver pair with a message on the network, (src, dst, -1) */
    int src, dst, tag, next;
    int qh, qt; /* the pair's messages waiting behind it */
} key_t_;

typedef struct { /* a callback waiting for its rank's CPU */
    int start, next;
    entry_t en;
} cb_t;

typedef struct {
    int *v, n, cap;
} ivec;

typedef struct { /* an unmatched send or receive at its receiving rank */
    int src, tag, idx;
} pend_t;

typedef struct {
    pend_t *v;
    int n, cap;
} pvec;

typedef struct {
    const double *d; /* detours, (start, end) pairs */
    const int64_t *off; /* per index: its first detour; off[count] = the end */
    int64_t *cur;
    double horizon;
} timeline_t;

static struct {
    /* parameters */
    int size, rpn, nodes, kind, itemsize, tag_base, tag_space, send_window, recv_window, sync_mode, ordered, root;
    int64_t count, seg_count, eager_elems, large_elems;
    int pair, cpu_copy, copy_poll;
    double event_cost, post_cost, L, g, bytecost, copycost, foldcost, large_cost, node_bw, contention, call_cost;
    int share; /* node_bw or contention: a node's copies affect one another (World._share) */
    const int32_t *links;
    const int64_t *loff;
    timeline_t cpu, net;
    int has_cpu, has_net;
    /* state */
    ev_t *heap;
    int64_t nheap, capheap, seq;
    msg_t *msgs;
    int nmsg, capmsg, freemsg;
    recv_t *recvs;
    int nrecv, caprecv, freerecv;
    ent_t *ents;
    int nent, capent, freeent;
    key_t_ *keys;
    int nkey, capkey, freekey, *buckets, nbuckets, livekeys;
    cb_t *cbs;
    int ncb, capcb, freecb;
    int *qhead, *qtail;
    pvec *precv, *psend;
    double *busy, now, clock;
    int cur;
    ivec *out, *inn;
    int64_t *lkey;
    double *lkt;
    int *lmsg, *lpos, *lheap, nlheap;
    double *last_start;
    unsigned char *has_last;
    ivec *copies_i;
    double **copies;
    int *ncopies, *capcopies, ncopynodes;
    double *finished;
    ac_op **ops;
    ac_engine *eng;
    int left, err, overflow;
    int64_t events, dropped, callbacks, messages, bytes;
    double latest; /* the latest finish time a link ever scheduled (FairLinks.latest) */
    /* lock-step baselines (lockstep.LockStep): every rank's steps, as Python's schedules wrote them */
    int fifo; /* links 'fifo' (FifoLinks): the links' next free times instead of fair shares */
    double *out_free, *in_free;
    int lockstep;
    int64_t ls_copy; /* elements each rank copies at its start (Reduce, Allreduce: MPI's scratch copy) */
    const int64_t *ls_rank, *ls_step, *ls_ops;
    double fault_cost;
    int64_t fault_elems;
    struct ls_rank *ls;
    /* described networks (pathlinks.PathLinks, maxmin.refill): the routes Python made, sorted by
     * src * size + dst; a message's links, their weights, its route's latency and slowest link's cost */
    int path, maxmin, nlinks, nroutes, lnodes; /* lnodes: link-heap slots (per rank on a described network) */
    const int64_t *pkeys, *poff;
    const int32_t *plinks;
    const double *pweights, *proute, *lcost;
    int64_t miss; /* the (src * size + dst) of a route Python did not hand over (SIM_ROUTE) */
    ivec *on; /* per link: the messages on it, in order of arrival */
    int64_t stamp, fgen;
    int64_t *fgen_of, *top_gen, *least_gen, *touch_gen, *dirty_gen;
    double *froom, *fheld, *top_val, *least_val;
    int *fcount;
    ivec *fmine;
    ivec flinks, watch_x, watch_g, core, members, more, touched, least_links, dirty;
    struct fh { double level; int x; } *fheap;
    int nfheap, capfheap;
} W;

/* ---------------------------------------------------------------- the heap (4-ary): (time, sequence) order */
static int ev_less(const ev_t *x, const ev_t *y) { return x->t < y->t || (x->t == y->t && x->seq < y->seq); }

static void push_key(double t, int64_t seq, int type, int a, int64_t b) {
    if (W.nheap == W.capheap) {
        int64_t cap = W.capheap ? 2 * W.capheap : 1024;
        ev_t *h = (ev_t *)realloc(W.heap, (size_t)cap * sizeof(ev_t));
        if (!h) {
            W.err = SIM_NOMEM;
            return;
        }
        W.heap = h;
        W.capheap = cap;
    }
    ev_t e = {t, seq, type, a, b};
    int64_t i = W.nheap++;
    while (i > 0) {
        int64_t p = (i - 1) >> 2;
        if (!ev_less(&e, &W.heap[p])) break;
        W.heap[i] = W.heap[p];
        i = p;
    }
    W.heap[i] = e;
}

static void push(double t, int type, int a, int64_t b) { push_key(t, W.seq++, type, a, b); }

/* Sift `x` down from slot i of the 4-ary heap of n entries. */
static void sift_down(int64_t i, ev_t x, int64_t n) {
    ev_t *h = W.heap;
    for (;;) {
        int64_t c = 4 * i + 1;
        if (c >= n) break;
        int64_t best = c, end = c + 4 < n ? c + 4 : n;
        for (int64_t j = c + 1; j < end; j++)
            if (ev_less(&h[j], &h[best])) best = j;
        if (!ev_less(&h[best], &x)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

static ev_t pop(void) {
    ev_t top = W.heap[0];
    ev_t last = W.heap[--W.nheap];
    if (W.nheap) sift_down(0, last, W.nheap);
    return top;
}

/* ---------------------------------------------------------------- detours (timelines.Timeline.advance) */
static double advance(timeline_t *tl, int idx, double t, double w) {
    const double *d = tl->d;
    int64_t end = tl->off[idx + 1], c = tl->cur[idx];
    while (c < end && d[2 * c + 1] <= t) c++;
    tl->cur[idx] = c;
    for (int64_t j = c;; j++) {
        if (j == end) {
            if (t + w >= tl->horizon) W.overflow = 1;
            return t + w;
        }
        double s = d[2 * j], e = d[2 * j + 1];
        if (t >= s)
            t = e;
        else if (t + w <= s)
            return t + w;
        else {
            w -= s - t;
            t = e;
        }
    }
}

static double cpu_after(int rank, double t, double w) { return W.has_cpu ? advance(&W.cpu, rank, t, w) : t + w; }

/* ---------------------------------------------------------------- small pools */
#define POOL_NEW(arr, n, cap, freel, T)                                                                \
    int idx;                                                                                         \
    if (freel >= 0) {                                                                                \
        idx = freel;                                                                                 \
        freel = arr[idx].next;                                                                       \
    } else {                                                                                         \
        if (n == cap) {                                                                              \
            int c2 = cap ? 2 * cap : 1024;                                                           \
            T *p2 = (T *)realloc(arr, (size_t)c2 * sizeof(T));                                       \
            if (!p2) {                                                                               \
                W.err = SIM_NOMEM;                                                                   \
                return -1;                                                                           \
            }                                                                                        \
            arr = p2;                                                                                \
            cap = c2;                                                                                \
        }                                                                                            \
        idx = n++;                                                                                   \
    }

static int msg_new(void) {
    POOL_NEW(W.msgs, W.nmsg, W.capmsg, W.freemsg, msg_t)
    memset(&W.msgs[idx], 0, sizeof(msg_t));
    W.msgs[idx].next = -1;
    return idx;
}

static void msg_free(int i) {
    W.msgs[i].next = W.freemsg;
    W.freemsg = i;
}

static int recv_new(void) {
    POOL_NEW(W.recvs, W.nrecv, W.caprecv, W.freerecv, recv_t)
    W.recvs[idx].next = -1;
    return idx;
}

static int ent_new(const entry_t *en) {
    POOL_NEW(W.ents, W.nent, W.capent, W.freeent, ent_t)
    W.ents[idx].en = *en;
    return idx;
}

/* The entry, taken off the pool. */
static entry_t ent_take(int i) {
    W.ents[i].next = W.freeent;
    W.freeent = i;
    return W.ents[i].en;
}

static int cb_new(void) {
    POOL_NEW(W.cbs, W.ncb, W.capcb, W.freecb, cb_t)
    W.cbs[idx].next = -1;
    return idx;
}

static int ivec_push(ivec *v, int x) {
    if (grow((void **)&v->v, &v->cap, v->n + 1, sizeof(int))) {
        W.err = SIM_NOMEM;
        return -1;
    }
    v->v[v->n++] = x;
    return 0;
}

static void ivec_remove(ivec *v, int x) {
    for (int i = 0; i < v->n; i++)
        if (v->v[i] == x) {
            memmove(v->v + i, v->v + i + 1, (size_t)(v->n - i - 1) * sizeof(int));
            v->n--;
            return;
        }
}

/* ---------------------------------------------------------------- keys: (src, dst, tag) -> a queue (pairs) */
static uint64_t key_hash(int src, int dst, int tag) {
    uint64_t h = (uint64_t)(uint32_t)src * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)dst * 0xC2B2AE3D27D4EB4Full + (h >> 29);
    h ^= (uint64_t)(uint32_t)tag * 0x165667B19E3779F9ull + (h >> 31);
    return h ^ (h >> 33);
}

static int key_rehash(int nb) {
    int *b = (int *)malloc((size_t)nb * sizeof(int));
    if (!b) {
        W.err = SIM_NOMEM;
        return -1;
    }
    for (int i = 0; i < nb; i++) b[i] = -1;
    for (int i = 0; i < W.nbuckets; i++) {
        int k = W.buckets[i];
        while (k >= 0) {
            int nx = W.keys[k].next;
            int h = (int)(key_hash(W.keys[k].src, W.keys[k].dst, W.keys[k].tag) & (uint64_t)(nb - 1));
            W.keys[k].next = b[h];
            b[h] = k;
            k = nx;
        }
    }
    free(W.buckets);
    W.buckets = b;
    W.nbuckets = nb;
    return 0;
}

/* The key's index, or -1 (made when `make`). */
static int key_find(int src, int dst, int tag, int make) {
    int h = (int)(key_hash(src, dst, tag) & (uint64_t)(W.nbuckets - 1));
    for (int k = W.buckets[h]; k >= 0; k = W.keys[k].next)
        if (W.keys[k].src == src && W.keys[k].dst == dst && W.keys[k].tag == tag) return k;
    if (!make) return -1;
    if (W.livekeys + 1 > W.nbuckets) {
        if (key_rehash(2 * W.nbuckets)) return -1;
        h = (int)(key_hash(src, dst, tag) & (uint64_t)(W.nbuckets - 1));
    }
    int k;
    {
        POOL_NEW(W.keys, W.nkey, W.capkey, W.freekey, key_t_)
        k = idx;
    }
    key_t_ *K = &W.keys[k];
    K->src = src;
    K->dst = dst;
    K->tag = tag;
    K->qh = K->qt = -1;
    K->next = W.buckets[h];
    W.buckets[h] = k;
    W.livekeys++;
    return k;
}

static void key_drop(int k) {
    key_t_ *K = &W.keys[k];
    int h = (int)(key_hash(K->src, K->dst, K->tag) & (uint64_t)(W.nbuckets - 1));
    int *p = &W.buckets[h];
    while (*p != k) p = &W.keys[*p].next;
    *p = K->next;
    K->next = W.freekey;
    W.freekey = k;
    W.livekeys--;
}

static void mq_push(key_t_ *K, int m) {
    W.msgs[m].next = -1;
    if (K->qt >= 0)
        W.msgs[K->qt].next = m;
    else
        K->qh = m;
    K->qt = m;
}

static int mq_pop(key_t_ *K) {
    int m = K->qh;
    K->qh = W.msgs[m].next;
    if (K->qh < 0) K->qt = -1;
    return m;
}

/* ---------------------------------------------------------------- the CPUs */
static void ls_start(int rank);
static void ls_complete(int rank, const entry_t *en);

static void run_cb(int rank, int start, const entry_t *en) {
    W.cur = rank;
    W.clock = cpu_after(rank, W.now, W.event_cost);
    if (W.lockstep) {
        if (start)
            ls_start(rank);
        else
            ls_complete(rank, en);
    } else if (start) {
        if (W.call_cost > 0) W.clock = cpu_after(rank, W.clock, W.call_cost); /* the call's fixed cost */
        int64_t off = W.loff[rank];
        char *local = (char *)(intptr_t)0x10000;
        char *target = NULL;
        if (W.kind == OPK_ALLREDUCE || (W.kind == OPK_REDUCE && rank == W.root)) target = (char *)(intptr_t)0x20000;
        intptr_t h = ac_start(W.eng, W.kind, 0, 0, 0, 0, W.itemsize, W.count, W.seg_count, W.tag_base, W.tag_space,
                              W.send_window, W.recv_window, W.sync_mode, W.ordered, local, target, W.links + off);
        if (!h) W.err = SIM_NOMEM;
        W.ops[rank] = (ac_op *)h;
    } else {
        entry_t e = *en;
        complete(W.eng, e, e.want, MPI_SUCCESS);
        if (W.ops[rank] && W.ops[rank]->state == ST_FAILED) W.err = SIM_FAILED;
    }
    W.busy[rank] = W.clock;
    W.callbacks++;
}

static void complete_on(int rank, int start, const entry_t *en) {
    if (W.busy[rank] <= W.now && W.qhead[rank] < 0) {
        run_cb(rank, start, en);
        return;
    }
    int c = cb_new();
    if (c < 0) return;
    W.cbs[c].start = start;
    if (en) W.cbs[c].en = *en;
    if (W.qhead[rank] < 0) {
        W.qhead[rank] = W.qtail[rank] = c;
        push(W.busy[rank], EV_WAKE, rank, 0);
    } else {
        W.cbs[W.qtail[rank]].next = c;
        W.qtail[rank] = c;
    }
}

static void wake(int rank) {
    if (W.busy[rank] > W.now) {
        push(W.busy[rank], EV_WAKE, rank, 0);
        return;
    }
    int c = W.qhead[rank];
    W.qhead[rank] = W.cbs[c].next;
    if (W.qhead[rank] < 0) W.qtail[rank] = -1;
    cb_t item = W.cbs[c];
    W.cbs[c].next = W.freecb;
    W.freecb = c;
    run_cb(rank, item.start, &item.en);
    if (W.qhead[rank] >= 0) push(W.busy[rank], EV_WAKE, rank, 0);
}

static void sim_fold(int64_t nelem) {
    double cost = (double)nelem * W.foldcost;
    W.clock = cpu_after(W.cur, W.clock, nelem <= W.large_elems ? cost : cost * W.large_cost);
}

static void sim_op_done(ac_op *op) {
    (void)op;
    if (W.finished[W.cur] >= 0) {
        W.err = SIM_FAILED;
        return;
    }
    W.finished[W.cur] = W.clock;
    W.left--;
}

/* ---------------------------------------------------------------- posting (World._isend / _irecv) */
/* Unmatched sends and receives are kept per receiving rank, in posting order: short lists scanned for
 * the first (source, tag) match give MPI's (and World's) matching order without a global table. */
static int pvec_take(pvec *p, int src, int tag) {
    for (int i = 0; i < p->n; i++)
        if (p->v[i].src == src && p->v[i].tag == tag) {
            int idx = p->v[i].idx;
            memmove(p->v + i, p->v + i + 1, (size_t)(p->n - i - 1) * sizeof(pend_t));
            p->n--;
            return idx;
        }
    return -1;
}

static void pvec_add(pvec *p, int src, int tag, int idx) {
    if (grow((void **)&p->v, &p->cap, p->n + 1, sizeof(pend_t))) {
        W.err = SIM_NOMEM;
        return;
    }
    p->v[p->n++] = (pend_t){src, tag, idx};
}

static double handshake(int src, int dst);

static void sim_post(ac_op *op, const entry_t *en, int is_recv, int synchronous, int64_t nelem) {
    (void)op;
    int rank = W.cur;
    double t = W.clock = cpu_after(rank, W.clock, W.post_cost);
    if (!is_recv) {
        int m = msg_new();
        if (m < 0) return;
        msg_t *M = &W.msgs[m];
        M->src = rank;
        M->dst = en->peer;
        M->tag = en->tag;
        M->n = nelem;
        M->se = ent_new(en);
        M->ts = t;
        M->eager = !synchronous && nelem <= W.eager_elems;
        M->pending = M->eager ? 2 : 1;
        int r = pvec_take(&W.precv[en->peer], rank, en->tag);
        if (r >= 0) {
            M->re = W.recvs[r].ei;
            M->tr = W.recvs[r].tr;
            M->has_recv = 1;
            W.recvs[r].next = W.freerecv;
            W.freerecv = r;
            if (!M->eager) {
                push((M->ts > M->tr ? M->ts : M->tr) + handshake(rank, en->peer), EV_READY, 0, m);
                return;
            }
        } else {
            pvec_add(&W.psend[en->peer], rank, en->tag, m);
        }
        if (M->eager) push(M->ts, EV_READY, 0, m);
        return;
    }
    int m = pvec_take(&W.psend[rank], en->peer, en->tag);
    if (m >= 0) {
        msg_t *M = &W.msgs[m];
        M->re = ent_new(en);
        M->tr = t;
        M->has_recv = 1;
        if (!M->eager)
            push((M->ts > t ? M->ts : t) + handshake(en->peer, rank), EV_READY, 0, m);
        else if (M->landed)
            push(t, EV_LATE_RECV, 0, m);
        return;
    }
    int r = recv_new();
    if (r < 0) return;
    W.recvs[r].ei = ent_new(en);
    W.recvs[r].tr = t;
    pvec_add(&W.precv[rank], en->peer, en->tag, r);
}

/* ---------------------------------------------------------------- the network */
static int node_of(int rank) { return W.rpn > 1 ? rank / W.rpn : 0; }

/* World._shared: a shared-memory copy's duration under node_bw and copy_contention */
static double shared_copy(int dst, double start, int64_t n, double dur) {
    int nd = node_of(dst);
    double *ends = W.copies[nd];
    int k = 0;
    for (int i = 0; i < W.ncopies[nd]; i++)
        if (ends[i] > start) ends[k++] = ends[i];
    W.ncopies[nd] = k;
    if (W.contention > 0) dur *= pow((double)(k + 1), W.contention);
    if (!(W.node_bw > 0)) return dur;
    double need = (double)n * W.itemsize * (double)(k + 1) / W.node_bw;
    return dur > need ? dur : need;
}

static void copy_ended(int dst, double end) {
    int nd = node_of(dst);
    if (grow((void **)&W.copies[nd], &W.capcopies[nd], W.ncopies[nd] + 1, sizeof(double))) {
        W.err = SIM_NOMEM;
        return;
    }
    W.copies[nd][W.ncopies[nd]++] = end;
}

static void land(int m, double arrival) {
    msg_t *M = &W.msgs[m];
    if (W.pair) {
        int k = key_find(M->src, M->dst, -1, 0);
        if (k >= 0) push(W.now, EV_PAIR_NEXT, M->src, M->dst);
    }
    if (M->eager) push(M->end, EV_EAGER_SENT, 0, m);
    push(arrival, EV_ARRIVE, 0, m);
    W.messages++;
    W.bytes += M->n * W.itemsize;
}

/* ---------------------------------------------------------------- fair links (network.FairLinks)
 * Each busy outgoing link's next finish is the least (finish time, sequence) key of its messages, as
 * FairLinks keeps it; here the links sit in an indexed heap of their own (lheap, one slot per node,
 * re-keyed in place) instead of leaving replaced entries stale in the event heap. The main loop takes
 * whichever of the two heaps' tops has the smaller key: the same order of events. A replaced key counts
 * one event, as its stale entry would when popped or swept there. */
static int lh_less(int x, int y) {
    return W.lkt[x] < W.lkt[y] || (W.lkt[x] == W.lkt[y] && W.lkey[x] < W.lkey[y]);
}

static void lh_place(int i, int node) {
    W.lheap[i] = node;
    W.lpos[node] = i;
}

static void lh_up(int i) {
    int node = W.lheap[i];
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (!lh_less(node, W.lheap[p])) break;
        lh_place(i, W.lheap[p]);
        i = p;
    }
    lh_place(i, node);
}

static void lh_down(int i) {
    int node = W.lheap[i], n = W.nlheap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && lh_less(W.lheap[c + 1], W.lheap[c])) c++;
        if (!lh_less(W.lheap[c], node)) break;
        lh_place(i, W.lheap[c]);
        i = c;
    }
    lh_place(i, node);
}

/* Give `node`'s link the key (t, sq) of message m (inserting it, or re-keying it in place). */
static void lh_set(int node, double t, int64_t sq, int m) {
    W.lkt[node] = t;
    W.lkey[node] = sq;
    W.lmsg[node] = m;
    int i = W.lpos[node];
    if (i < 0) {
        i = W.nlheap++;
        lh_place(i, node);
        lh_up(i);
        return;
    }
    lh_up(i);
    lh_down(W.lpos[node]);
}

static int lh_pop(void) {
    int top = W.lheap[0];
    W.lpos[top] = -1;
    int last = W.lheap[--W.nlheap];
    if (W.nlheap) {
        lh_place(0, last);
        lh_down(0);
    }
    return top;
}

static void enter_min(int node, double bt, int64_t bs, int bm) {
    int64_t old = W.lkey[node];
    if (old == bs) return;
    /* FairLinks: -1 for each entry it pushes (counted when popped), +1 for the stale one it replaces */
    if (old < 0) W.dropped--;
    lh_set(node, bt, bs, bm);
}

typedef struct {
    int node, bm, full;
    double bt;
    int64_t bs;
} least_t;

static void reshare(int src, int dst, double now) {
    ivec *out = &W.out[src], *inn = &W.inn[dst];
    int n_out = out->n;
    double bt = INFINITY;
    int64_t bs = INT64_MAX;
    int bm = -1;
    for (int i = 0; i < out->n; i++) {
        int m = out->v[i];
        msg_t *f = &W.msgs[m];
        f->rem -= f->rate * (now - f->tupd);
        f->tupd = now;
        int n_in = W.inn[f->dnode].n;
        f->rate = 1.0 / (double)(n_out > n_in ? n_out : n_in);
        double rem = f->rem;
        double t = f->tfin = now + (rem > 0.0 ? rem : 0.0) / f->rate;
        int64_t sq = f->sq = W.seq++;
        if (t > W.latest) W.latest = t;
        if (t < bt || (t == bt && sq < bs)) {
            bt = t;
            bs = sq;
            bm = m;
        }
    }
    int n_in = inn->n, k = n_out;
    least_t others[32], *oth = others;
    int nothers = 0, capoth = 32;
    for (int i = 0; i < inn->n; i++) {
        int m = inn->v[i];
        msg_t *f = &W.msgs[m];
        int snode = f->snode;
        if (snode == src) continue;
        k++;
        least_t *o = NULL;
        for (int j = 0; j < nothers; j++)
            if (oth[j].node == snode) {
                o = &oth[j];
                break;
            }
        if (!o) {
            if (nothers == capoth) {
                least_t *p = (least_t *)malloc((size_t)capoth * 2 * sizeof(least_t));
                if (!p) {
                    W.err = SIM_NOMEM;
                    return;
                }
                memcpy(p, oth, (size_t)nothers * sizeof(least_t));
                if (oth != others) free(oth);
                oth = p;
                capoth *= 2;
            }
            o = &oth[nothers++];
            *o = (least_t){snode, W.lmsg[snode], 0, W.lkt[snode], W.lkey[snode]};
        }
        if (f->sq == W.lkey[snode]) o->full = 1; /* the link's least message moves: look at them all */
        f->rem -= f->rate * (now - f->tupd);
        f->tupd = now;
        int no = W.out[snode].n;
        f->rate = 1.0 / (double)(no > n_in ? no : n_in);
        double rem = f->rem;
        double t = f->tfin = now + (rem > 0.0 ? rem : 0.0) / f->rate;
        int64_t sq = f->sq = W.seq++;
        if (t > W.latest) W.latest = t;
        if (!o->full && (t < o->bt || (t == o->bt && sq < o->bs))) {
            o->bt = t;
            o->bs = sq;
            o->bm = m;
        }
    }
    W.dropped += k;
    if (out->n) enter_min(src, bt, bs, bm);
    for (int j = 0; j < nothers; j++) {
        least_t *o = &oth[j];
        if (o->full) {
            ivec *fl = &W.out[o->node];
            o->bt = INFINITY;
            o->bs = INT64_MAX;
            for (int i = 0; i < fl->n; i++) {
                msg_t *f = &W.msgs[fl->v[i]];
                if (f->tfin < o->bt || (f->tfin == o->bt && f->sq < o->bs)) {
                    o->bt = f->tfin;
                    o->bs = f->sq;
                    o->bm = fl->v[i];
                }
            }
        }
        enter_min(o->node, o->bt, o->bs, o->bm);
    }
    if (oth != others) free(oth);
}

static void path_begin(int m);
static void path_finish(int src);

static void begin(int m) {
    if (W.path) {
        path_begin(m);
        return;
    }
    msg_t *M = &W.msgs[m];
    double now = W.now;
    int src = W.rpn == 1 ? M->src : M->src / W.rpn, dst = W.rpn == 1 ? M->dst : M->dst / W.rpn;
    M->snode = src;
    M->dnode = dst;
    M->start = M->tupd = now;
    M->rem = (double)M->n * W.bytecost;
    M->rate = 0.0;
    if (ivec_push(&W.out[src], m) || ivec_push(&W.inn[dst], m)) return;
    if (W.out[src].n == 1 && W.inn[dst].n == 1) { /* alone on both links: full speed */
        M->rate = 1.0;
        M->tfin = now + M->rem;
        if (M->tfin > W.latest) W.latest = M->tfin;
        M->sq = W.seq++;
        lh_set(src, M->tfin, M->sq, m);
        return;
    }
    reshare(src, dst, now);
}

/* The least message of `src`'s outgoing link (just taken off the link heap) has finished leaving. */
static void finish(int src) {
    if (W.path) {
        path_finish(src);
        return;
    }
    int m = W.lmsg[src];
    msg_t *M = &W.msgs[m];
    int dst = M->dnode;
    ivec *out = &W.out[src];
    ivec_remove(out, m);
    ivec_remove(&W.inn[dst], m);
    M->end = W.now;
    W.lkey[src] = -1;
    if (out->n || W.inn[dst].n) reshare(src, dst, W.now);
    land(m, W.now + W.L);
}

/* ---------------------------------------------------------------- described networks (pathlinks.PathLinks)
 * A message crosses the links of its route (made in Python by routes.Routes and handed over); each
 * sending rank's next finish sits in the link heap as with the fair links. When a message starts or
 * finishes, the messages on its links get new rates: max-min fair (maxmin.refill, progressive filling,
 * widened to held messages whose rate must move) or each its share of its most crowded link
 * (bottleneck); every float is computed by the same operations in the same order as there. */
static const double MM_EPS = 1e-9; /* maxmin.EPS */
static const double MM_SAME = 1e-12; /* pathlinks._SAME */
#define MM_SCAN 24 /* maxmin._SCAN */

/* The index of the route from rank src to rank dst; -1 (and SIM_ROUTE) if Python did not hand it over. */
static int route_of(int src, int dst) {
    int64_t key = (int64_t)src * W.size + dst;
    int lo = 0, hi = W.nroutes;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (W.pkeys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < W.nroutes && W.pkeys[lo] == key) return lo;
    if (!W.err) {
        W.err = SIM_ROUTE;
        W.miss = key;
    }
    return -1;
}

/* A rendezvous handshake's latency (World._route_latency on a described network; L otherwise). */
static double handshake(int src, int dst) {
    int rpn = W.rpn;
    if (!W.path || W.cpu_copy || (rpn > 1 && src / rpn == dst / rpn)) return W.L;
    int r = route_of(src, dst);
    return r < 0 ? W.L : W.proute[2 * r];
}

/* maxmin's heap of (level, link) */
static int fh_less(const struct fh *a, const struct fh *b) { return a->level < b->level || (a->level == b->level && a->x < b->x); }

static void fh_push(double level, int x) {
    if (grow((void **)&W.fheap, &W.capfheap, W.nfheap + 1, sizeof(struct fh))) {
        W.err = SIM_NOMEM;
        return;
    }
    struct fh e = {level, x};
    int i = W.nfheap++;
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (!fh_less(&e, &W.fheap[p])) break;
        W.fheap[i] = W.fheap[p];
        i = p;
    }
    W.fheap[i] = e;
}

static struct fh fh_pop(void) {
    struct fh top = W.fheap[0], x = W.fheap[--W.nfheap];
    int n = W.nfheap, i = 0;
    if (n) {
        for (;;) {
            int c = 2 * i + 1;
            if (c >= n) break;
            if (c + 1 < n && fh_less(&W.fheap[c + 1], &W.fheap[c])) c++;
            if (!fh_less(&W.fheap[c], &x)) break;
            W.fheap[i] = W.fheap[c];
            i = c;
        }
        W.fheap[i] = x;
    }
    return top;
}

/* maxmin._fill: progressive filling of W.members (marked `token`) with the other messages held; the held
 * messages that must join go to W.more (none: the rates are max-min fair). */
static void mm_fill(int64_t token) {
    int64_t gen = ++W.fgen;
    const int64_t *poff = W.poff;
    const int32_t *plinks = W.plinks;
    const double *pw = W.pweights, *cost = W.lcost;
    W.flinks.n = W.watch_x.n = W.watch_g.n = W.more.n = 0;
    for (int i = 0; i < W.members.n; i++) {
        int m = W.members.v[i];
        msg_t *f = &W.msgs[m];
        f->nrate = -1.0;
        for (int64_t k = poff[f->route]; k < poff[f->route + 1]; k++) {
            int x = plinks[k];
            if (W.fgen_of[x] == gen) {
                W.fcount[x]++;
                if (ivec_push(&W.fmine[x], m)) return;
                continue;
            }
            W.fgen_of[x] = gen;
            W.fcount[x] = 1;
            W.fmine[x].n = 0;
            if (ivec_push(&W.fmine[x], m) || ivec_push(&W.flinks, x)) return;
            double cx = cost[x], used = 0.0, top = 0.0;
            const ivec *on = &W.on[x];
            for (int j = 0; j < on->n; j++) {
                msg_t *g = &W.msgs[on->v[j]];
                if (g->mark != token) {
                    double u = g->rate * (cx / g->worst);
                    used += u;
                    if (u > top) top = u;
                    if (g->bn == x && (ivec_push(&W.watch_x, x) || ivec_push(&W.watch_g, on->v[j]))) return;
                }
            }
            W.froom[x] = 1.0 - used;
            W.fheld[x] = top;
        }
    }
    int left = W.members.n;
    int heap = W.flinks.n > MM_SCAN;
    if (heap) {
        W.nfheap = 0;
        for (int i = 0; i < W.flinks.n; i++) {
            int x = W.flinks.v[i];
            fh_push(W.froom[x] / ((double)W.fcount[x] * cost[x]), x);
        }
    }
    while (left) {
        int x = -1;
        if (!heap) {
            double level = 0.0;
            for (int i = 0; i < W.flinks.n; i++) {
                int y = W.flinks.v[i], n = W.fcount[y];
                if (n) {
                    double v = W.froom[y] / ((double)n * cost[y]);
                    if (x < 0 || v < level || (v == level && y < x)) {
                        x = y;
                        level = v;
                    }
                }
            }
        } else {
            if (!W.nfheap || W.err) {
                W.err = W.err ? W.err : SIM_NORATE;
                return;
            }
            struct fh e = fh_pop();
            x = e.x;
            int n = W.fcount[x];
            if (n == 0 || W.froom[x] / ((double)n * cost[x]) != e.level) continue;
        }
        int n = W.fcount[x];
        double r0 = W.froom[x], cx = cost[x];
        int64_t tg = 0;
        if (heap) {
            W.touched.n = 0;
            tg = ++W.fgen;
        }
        const ivec *mine = &W.fmine[x];
        for (int i = 0; i < mine->n; i++) {
            msg_t *f = &W.msgs[mine->v[i]];
            if (f->nrate >= 0.0) continue;
            double rate = r0 > 0.0 ? r0 / ((double)n * (cx / f->worst)) : 0.0;
            f->nrate = rate;
            f->nbn = x;
            left--;
            for (int64_t k = poff[f->route]; k < poff[f->route + 1]; k++) {
                int y = plinks[k];
                W.froom[y] -= rate * pw[k];
                W.fcount[y]--;
                if (heap && W.touch_gen[y] != tg) {
                    W.touch_gen[y] = tg;
                    if (ivec_push(&W.touched, y)) return;
                }
            }
        }
        if (heap)
            for (int i = 0; i < W.touched.n; i++) {
                int y = W.touched.v[i], ny = W.fcount[y];
                if (ny) fh_push(W.froom[y] / ((double)ny * cost[y]), y);
            }
    }
    for (int i = 0; i < W.watch_x.n; i++) { /* a held message whose bottleneck was refilled */
        int x = W.watch_x.v[i];
        msg_t *g = &W.msgs[W.watch_g.v[i]];
        double cx = cost[x];
        if (W.top_gen[x] != gen) {
            const ivec *mine = &W.fmine[x];
            double most = 0.0;
            for (int j = 0; j < mine->n; j++) {
                msg_t *f = &W.msgs[mine->v[j]];
                double u = f->nrate * (cx / f->worst);
                if (j == 0 || u > most) most = u;
            }
            W.top_gen[x] = gen;
            W.top_val[x] = most;
        }
        if (W.froom[x] > MM_EPS || (g->rate * (cx / g->worst)) * (1.0 + MM_EPS) < W.top_val[x])
            if (ivec_push(&W.more, W.watch_g.v[i])) return;
    }
    W.least_links.n = 0;
    for (int i = 0; i < W.members.n; i++) {
        msg_t *f = &W.msgs[W.members.v[i]];
        int x = f->nbn;
        if (W.fheld[x] != 0.0) {
            double u = f->nrate * (cost[x] / f->worst);
            double cur = W.least_gen[x] == gen ? W.least_val[x] : 2.0;
            if (u < cur) {
                if (W.least_gen[x] != gen) {
                    W.least_gen[x] = gen;
                    if (ivec_push(&W.least_links, x)) return;
                }
                W.least_val[x] = u;
            }
        }
    }
    for (int i = 0; i < W.least_links.n; i++) { /* no held message faster than a member on its bottleneck */
        int x = W.least_links.v[i];
        double bound = W.least_val[x] * (1.0 + MM_EPS);
        if (W.fheld[x] > bound) {
            double cx = cost[x];
            const ivec *on = &W.on[x];
            for (int j = 0; j < on->n; j++) {
                msg_t *g = &W.msgs[on->v[j]];
                if (g->mark != token && g->rate * (cx / g->worst) > bound && ivec_push(&W.more, on->v[j])) return;
            }
        }
    }
}

/* maxmin.refill: max-min fair rates (nrate, nbn) for W.core and whatever held messages must move with
 * them, into W.members (W.core first, in its order). */
static void mm_refill(int64_t token) {
    W.members.n = 0;
    if (W.core.n < 2) {
        if (!W.core.n) return;
        int m = W.core.v[0];
        msg_t *f = &W.msgs[m];
        int alone = 1, bn = -1;
        for (int64_t k = W.poff[f->route]; k < W.poff[f->route + 1]; k++) {
            int x = W.plinks[k];
            if (W.on[x].n != 1) {
                alone = 0;
                break;
            }
            if (W.lcost[x] == f->worst && (bn < 0 || x < bn)) bn = x;
        }
        if (alone) { /* alone on its route: full speed, the costliest link first */
            f->mark = token;
            f->nrate = 1.0;
            f->nbn = bn;
            ivec_push(&W.members, m);
            return;
        }
    }
    for (int i = 0; i < W.core.n; i++) {
        if (ivec_push(&W.members, W.core.v[i])) return;
        W.msgs[W.core.v[i]].mark = token;
    }
    for (;;) {
        mm_fill(token);
        if (W.err || !W.more.n) return;
        for (int i = 0; i < W.more.n; i++) {
            msg_t *g = &W.msgs[W.more.v[i]];
            if (g->mark != token) {
                g->mark = token;
                if (ivec_push(&W.members, W.more.v[i])) return;
            }
        }
    }
}

/* PathLinks._apply for one message: its new rate and finish key; its sender's entry is looked at after. */
static void path_apply(int m, double rate, double now) {
    msg_t *f = &W.msgs[m];
    f->rem -= f->rate * (now - f->tupd);
    f->tupd = now;
    f->rate = rate;
    double rem = f->rem;
    double t = f->tfin = now + (rem > 0.0 ? rem : 0.0) / rate;
    if (t > W.latest) W.latest = t;
    f->sq = W.seq++;
    if (W.dirty_gen[f->snode] != W.stamp) {
        W.dirty_gen[f->snode] = W.stamp;
        ivec_push(&W.dirty, f->snode);
    }
}

/* SharedLinks._enter: the link heap's entry of sending rank `node`, the least key of its messages. */
static void path_enter(int node) {
    const ivec *fl = &W.out[node];
    if (!fl->n) return;
    double bt = INFINITY;
    int64_t bs = INT64_MAX;
    int bm = -1;
    for (int i = 0; i < fl->n; i++) {
        msg_t *f = &W.msgs[fl->v[i]];
        if (f->tfin < bt || (f->tfin == bt && f->sq < bs)) {
            bt = f->tfin;
            bs = f->sq;
            bm = fl->v[i];
        }
    }
    enter_min(node, bt, bs, bm);
}

/* PathLinks._reshare: new rates after a change of load on the links of route r (src's message started or
 * finished), then new link-heap entries for src and every sender whose message moved. */
static void path_reshare(int r, double now, int src) {
    int64_t stamp = ++W.stamp;
    W.dirty.n = 0;
    W.dirty_gen[src] = stamp;
    ivec_push(&W.dirty, src);
    int moved = 0;
    if (W.maxmin) {
        W.core.n = 0;
        for (int64_t k = W.poff[r]; k < W.poff[r + 1]; k++) {
            const ivec *on = &W.on[W.plinks[k]];
            for (int j = 0; j < on->n; j++) {
                msg_t *f = &W.msgs[on->v[j]];
                if (f->stamp != stamp) {
                    f->stamp = stamp;
                    if (ivec_push(&W.core, on->v[j])) return;
                }
            }
        }
        mm_refill(stamp);
        if (W.err) return;
        int ncore = W.core.n;
        for (int i = 0; i < W.members.n; i++) {
            int m = W.members.v[i];
            msg_t *f = &W.msgs[m];
            double rate = f->nrate;
            f->bn = f->nbn;
            if (i >= ncore && fabs(rate - f->rate) <= MM_SAME * f->rate) continue;
            if (rate <= 0.0) {
                W.err = SIM_NORATE;
                return;
            }
            path_apply(m, rate, now);
            moved++;
        }
    } else {
        for (int64_t k = W.poff[r]; k < W.poff[r + 1]; k++) {
            const ivec *on = &W.on[W.plinks[k]];
            for (int j = 0; j < on->n; j++) {
                int m = on->v[j];
                msg_t *f = &W.msgs[m];
                if (f->stamp == stamp) continue;
                f->stamp = stamp;
                double most = 0.0;
                for (int64_t q = W.poff[f->route]; q < W.poff[f->route + 1]; q++) {
                    double v = W.pweights[q] * (double)W.on[W.plinks[q]].n;
                    if (v > most) most = v;
                }
                path_apply(m, 1.0 / most, now);
                moved++;
            }
        }
    }
    W.dropped += moved; /* each message rescheduled is one event */
    for (int i = 0; i < W.dirty.n; i++) path_enter(W.dirty.v[i]);
}

static void path_begin(int m) {
    msg_t *M = &W.msgs[m];
    double now = W.now;
    int src = M->src, r = route_of(src, M->dst);
    if (r < 0) return;
    M->route = r;
    M->snode = src;
    M->start = M->tupd = now;
    M->worst = W.proute[2 * r + 1];
    M->rem = (double)M->n * (M->worst * (double)W.itemsize);
    M->rate = 0.0;
    M->stamp = M->mark = 0;
    M->bn = -1;
    for (int64_t k = W.poff[r]; k < W.poff[r + 1]; k++)
        if (ivec_push(&W.on[W.plinks[k]], m)) return;
    if (ivec_push(&W.out[src], m)) return;
    path_reshare(r, now, src);
}

/* The least message of sending rank src (just taken off the link heap) has finished leaving. */
static void path_finish(int src) {
    int m = W.lmsg[src];
    msg_t *M = &W.msgs[m];
    int r = M->route;
    ivec_remove(&W.out[src], m);
    W.lkey[src] = -1;
    M->end = W.now;
    for (int64_t k = W.poff[r]; k < W.poff[r + 1]; k++) ivec_remove(&W.on[W.plinks[k]], m);
    path_reshare(r, W.now, src);
    land(m, W.now + W.proute[2 * r]);
}

/* ---------------------------------------------------------------- FIFO links (network.FifoLinks) */
/* The message crosses its receiver's link in order of first-byte arrival (it left at M->start). */
static void fifo_leave(int m) {
    msg_t *M = &W.msgs[m];
    int node = M->dst / W.rpn;
    double dur = (double)M->n * W.bytecost;
    double rx = M->start + W.L;
    if (W.in_free[node] > rx) rx = W.in_free[node];
    W.in_free[node] = rx + dur;
    double arrival = rx + dur, tail = M->end + W.L;
    land(m, tail > arrival ? tail : arrival);
}

/* One message at a time on the sender's link, first ready first served. */
static void fifo_depart(int m) {
    msg_t *M = &W.msgs[m];
    int node = M->src / W.rpn;
    double now = W.now, free = W.out_free[node];
    double start = free <= now ? now : free;
    double dur = (double)M->n * W.bytecost;
    double end = W.has_net ? advance(&W.net, node, start, dur) : start + dur;
    double gap_end = start + W.g;
    W.out_free[node] = end > gap_end ? end : gap_end;
    M->start = start;
    M->end = end;
    if (start == now)
        fifo_leave(m);
    else
        push(start, EV_LEAVE, 0, m);
}

static void links_depart(int m) {
    if (W.fifo) {
        fifo_depart(m);
        return;
    }
    msg_t *M = &W.msgs[m];
    int node = W.path ? M->src : M->src / W.rpn; /* PathLinks: one gap and detour timeline per rank */
    double now = W.now, start = now;
    if (W.g > 0) {
        if (W.has_last[node] && W.last_start[node] + W.g > start) start = W.last_start[node] + W.g;
        W.last_start[node] = start;
        W.has_last[node] = 1;
    }
    if (W.has_net) start = advance(&W.net, node, start, 0.0);
    if (start > now)
        push(start, EV_BEGIN, 0, m);
    else
        begin(m);
}

static void depart(int m) {
    msg_t *M = &W.msgs[m];
    int rpn = W.rpn;
    if (rpn > 1 && M->src / rpn == M->dst / rpn) {
        double now = W.now, copy = (double)M->n * W.copycost;
        if (M->n > W.large_elems) copy *= W.large_cost;
        if (W.share) {
            copy = shared_copy(M->dst, now, M->n, copy);
            copy_ended(M->dst, now + copy);
        }
        M->start = now;
        M->end = now + copy;
        land(m, now + W.L + copy);
        return;
    }
    if (W.pair) {
        int k = key_find(M->src, M->dst, -1, 0);
        if (k >= 0) {
            mq_push(&W.keys[k], m);
            return;
        }
        if (key_find(M->src, M->dst, -1, 1) < 0) return;
    }
    links_depart(m);
}

static void pair_next(int src, int dst) {
    int k = key_find(src, dst, -1, 0);
    key_t_ *K = &W.keys[k];
    if (K->qh >= 0)
        links_depart(mq_pop(K));
    else
        key_drop(k);
}

static void ready(int m) {
    msg_t *M = &W.msgs[m];
    if (!M->eager) {
        int dst = M->dst, rpn = W.rpn;
        double now = W.now, start = W.busy[dst] > now ? W.busy[dst] : now;
        if (W.cpu_copy || (rpn > 1 && M->src / rpn == dst / rpn)) {
            if (W.copy_poll && (W.busy[dst] > now || W.qhead[dst] >= 0)) { /* completions first (World._ready) */
                push(start, EV_READY, 0, m);
                return;
            }
            double dur = (double)M->n * W.copycost;
            if (M->n > W.large_elems) dur *= W.large_cost;
            if (W.share) dur = shared_copy(dst, start, M->n, dur);
            double end = cpu_after(dst, start, dur);
            if (W.share) copy_ended(dst, end);
            W.busy[dst] = end;
            M->start = M->end = start;
            W.messages++;
            W.bytes += M->n * W.itemsize;
            push(end, EV_ARRIVE, 0, m);
            return;
        }
        if (W.has_cpu) start = advance(&W.cpu, dst, start, 0.0);
        if (start > now) {
            push(start, EV_DEPART, 0, m);
            return;
        }
    }
    depart(m);
}

static void settle(int m) {
    if (--W.msgs[m].pending == 0) msg_free(m);
}

static void deliver(int m) {
    msg_t *M = &W.msgs[m];
    entry_t en = ent_take(M->re);
    if (en.want != M->n * W.itemsize) {
        W.err = SIM_SIZE;
        return;
    }
    int dst = M->dst;
    settle(m);
    complete_on(dst, 0, &en);
}

static void arrive(int m) {
    msg_t *M = &W.msgs[m];
    if (!M->has_recv) { /* eager, receive not posted yet: it completes when posted */
        M->landed = 1;
        return;
    }
    int eager = M->eager, src = M->src, se = M->se;
    deliver(m); /* (may free an eager message whose send completed) */
    if (!eager) {
        entry_t sen = ent_take(se);
        complete_on(src, 0, &sen);
    }
}

static void eager_sent(int m) {
    entry_t sen = ent_take(W.msgs[m].se);
    int src = W.msgs[m].src;
    settle(m);
    complete_on(src, 0, &sen);
}

/* ---------------------------------------------------------------- lock-step baselines (lockstep.LockStep)
 * A rank walks its steps: a step's pre-posted receives first, then its sends and receives, all
 * waited for, then its folds, then the next step (steps whose waits are all done run on in the same
 * callback). The steps come from lockstep.py's schedules (Python writes them out per rank), so the C
 * core runs the same messages in the same order; tests/test_simcore.py compares the runs. */
enum { LS_SEND, LS_RECV, LS_FOLD, LS_POST, LS_POSTFOLD, LS_WAIT, LS_TOUCH };
enum { LSK_ONE = 100, LSK_POSTED = 101 }; /* the kind of a lock-step entry (its op is NULL) */

typedef struct {
    int peer, tag, id;
    int64_t lo, hi;
    unsigned char in_dict, done, waited, tmp;
} ls_post_t;

struct ls_rank {
    int64_t step; /* the next step (an index into W.ls_step) */
    int left, nfolds, capfolds, nposted, capposted, nextid;
    int64_t *folds;
    ls_post_t *posted;
};

static void ls_post_op(int rank, int kind, int peer, int64_t lo, int64_t hi, int tag, int id) {
    entry_t en = {NULL, 0, kind, id, 0, peer, tag, 0, (hi - lo) * W.itemsize, NULL};
    sim_post(NULL, &en, 1, 0, hi - lo);
}

static void ls_fold_add(struct ls_rank *S, int64_t n) {
    if (grow((void **)&S->folds, &S->capfolds, S->nfolds + 1, sizeof(int64_t))) {
        W.err = SIM_NOMEM;
        return;
    }
    S->folds[S->nfolds++] = n;
}

static void ls_folds(struct ls_rank *S) {
    for (int i = 0; i < S->nfolds; i++) sim_fold(S->folds[i]);
}

static ls_post_t *ls_find(struct ls_rank *S, int id) {
    for (int i = 0; i < S->nposted; i++)
        if (S->posted[i].id == id) return &S->posted[i];
    return NULL;
}

static void ls_forget(struct ls_rank *S, ls_post_t *p) {
    int i = (int)(p - S->posted);
    memmove(S->posted + i, S->posted + i + 1, (size_t)(S->nposted - i - 1) * sizeof(ls_post_t));
    S->nposted--;
}

static void ls_step(int rank) {
    struct ls_rank *S = &W.ls[rank];
    const int64_t *ops = W.ls_ops;
    for (;;) {
        if (S->step == W.ls_rank[rank + 1]) {
            for (int i = 0; i < S->nposted; i++)
                if (S->posted[i].in_dict) {
                    W.err = SIM_FAILED; /* receives posted, never waited */
                    return;
                }
            sim_op_done(NULL);
            return;
        }
        int64_t a = W.ls_step[S->step], b = W.ls_step[S->step + 1];
        S->step++;
        S->nfolds = 0;
        int left = 0;
        for (int64_t k = a; k < b; k++) { /* pre-posted receives first */
            const int64_t *op = ops + 5 * k;
            if (op[0] != LS_POST && op[0] != LS_POSTFOLD) continue;
            if (grow((void **)&S->posted, &S->capposted, S->nposted + 1, sizeof(ls_post_t))) {
                W.err = SIM_NOMEM;
                return;
            }
            for (int i = 0; i < S->nposted; i++) /* the same key posted again replaces it (a dict) */
                if (S->posted[i].in_dict && S->posted[i].peer == (int)op[1] && S->posted[i].lo == op[2] &&
                    S->posted[i].hi == op[3] && S->posted[i].tag == (int)op[4])
                    S->posted[i].in_dict = 0;
            int id = S->nextid++;
            S->posted[S->nposted++] =
                (ls_post_t){(int)op[1], (int)op[4], id, op[2], op[3], 1, 0, 0, op[0] == LS_POSTFOLD};
            ls_post_op(rank, LSK_POSTED, (int)op[1], op[2], op[3], (int)op[4], id);
        }
        for (int64_t k = a; k < b; k++) {
            const int64_t *op = ops + 5 * k;
            if (op[0] <= LS_FOLD) {
                left++;
            } else if (op[0] == LS_WAIT) {
                ls_post_t *p = NULL;
                for (int i = 0; i < S->nposted; i++)
                    if (S->posted[i].in_dict && S->posted[i].peer == (int)op[1] && S->posted[i].lo == op[2] &&
                        S->posted[i].hi == op[3] && S->posted[i].tag == (int)op[4]) {
                        p = &S->posted[i];
                        break;
                    }
                if (!p) {
                    W.err = SIM_FAILED; /* a wait for nothing posted (lockstep.py raises KeyError) */
                    return;
                }
                p->in_dict = 0;
                p->waited = 1;
                if (p->tmp) ls_fold_add(S, op[3] - op[2]);
                if (!p->done)
                    left++;
                else
                    ls_forget(S, p);
            }
        }
        S->left = left;
        for (int64_t k = a; k < b; k++) {
            const int64_t *op = ops + 5 * k;
            int kind = (int)op[0];
            if (kind == LS_SEND || kind == LS_RECV || kind == LS_FOLD) {
                if (kind == LS_FOLD) ls_fold_add(S, op[3] - op[2]);
                entry_t en = {NULL, 0, LSK_ONE, 0, 0, (int)op[1], (int)op[4], 0,
                              kind == LS_SEND ? -1 : (op[3] - op[2]) * W.itemsize, NULL};
                sim_post(NULL, &en, kind != LS_SEND, 0, op[3] - op[2]);
            } else if (kind == LS_TOUCH) {
                if (W.fault_cost > 0 && op[3] >= W.fault_elems) /* SimRank.touch */
                    W.clock = cpu_after(W.cur, W.clock, (double)op[2] * W.fault_cost);
            }
        }
        if (left) return;
        ls_folds(S);
    }
}

static void ls_one_done(int rank) {
    struct ls_rank *S = &W.ls[rank];
    if (--S->left) return;
    ls_folds(S);
    ls_step(rank);
}

static void ls_start(int rank) {
    W.ls[rank].step = W.ls_rank[rank];
    if (W.ls_copy) sim_fold(W.ls_copy); /* MPI folds into a copy of the contribution */
    ls_step(rank);
}

static void ls_complete(int rank, const entry_t *en) {
    if (en->kind == LSK_ONE) {
        ls_one_done(rank);
        return;
    }
    struct ls_rank *S = &W.ls[rank];
    ls_post_t *p = ls_find(S, en->child);
    p->done = 1;
    if (p->waited) {
        ls_forget(S, p);
        ls_one_done(rank);
    }
}

/* ---------------------------------------------------------------- the run */
static void cleanup(void) {
    if (W.ls) {
        for (int r = 0; r < W.size; r++) {
            free(W.ls[r].folds);
            free(W.ls[r].posted);
        }
        free(W.ls);
    }
    if (W.ops)
        for (int r = 0; r < W.size; r++)
            if (W.ops[r]) op_free(W.ops[r]);
    if (W.precv)
        for (int r = 0; r < W.size; r++) {
            free(W.precv[r].v);
            free(W.psend[r].v);
        }
    free(W.precv);
    free(W.psend);
    if (W.out)
        for (int i = 0; i < W.lnodes; i++) {
            free(W.out[i].v);
            free(W.inn[i].v);
        }
    for (int i = 0; i < W.nlinks; i++) {
        if (W.on) free(W.on[i].v);
        if (W.fmine) free(W.fmine[i].v);
    }
    free(W.on);
    free(W.fmine);
    free(W.fgen_of);
    free(W.top_gen);
    free(W.least_gen);
    free(W.touch_gen);
    free(W.dirty_gen);
    free(W.froom);
    free(W.fheld);
    free(W.top_val);
    free(W.least_val);
    free(W.fcount);
    free(W.fheap);
    ivec *vs[] = {&W.flinks, &W.watch_x, &W.watch_g, &W.core, &W.members, &W.more, &W.touched, &W.least_links, &W.dirty};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) free(vs[i]->v);
    if (W.copies)
        for (int i = 0; i < W.ncopynodes; i++) free(W.copies[i]);
    free(W.heap);
    free(W.msgs);
    free(W.recvs);
    free(W.ents);
    free(W.keys);
    free(W.buckets);
    free(W.cbs);
    free(W.qhead);
    free(W.qtail);
    free(W.busy);
    free(W.out);
    free(W.inn);
    free(W.lkey);
    free(W.lkt);
    free(W.out_free);
    free(W.in_free);
    free(W.lmsg);
    free(W.lpos);
    free(W.lheap);
    free(W.last_start);
    free(W.has_last);
    free(W.copies);
    free(W.ncopies);
    free(W.capcopies);
    free(W.ops);
    free(W.cpu.cur);
    free(W.net.cur);
    if (W.eng) {
        pthread_mutex_destroy(&W.eng->mu);
        pthread_cond_destroy(&W.eng->cv);
        free(W.eng->finished);
        free(W.eng);
    }
}

int ac_sim_abi(void) { return SIM_ABI; }

/* Run one simulated call of the tree protocols. ip: [size, ranks per node, kind, itemsize, count,
 * seg_count, tag_base, tag_space, send_window, recv_window, sync_mode, ordered, root, eager elements,
 * large elements (-1: none), pair order, cpu copies (transfer 'cpu'), has cpu noise, has net noise,
 * lock-step (1: the ranks run ls_* steps instead of the tree protocols), elements each lock-step rank
 * copies first, fault_from in elements, FIFO links, copy order 'poll']; fp: [event_cost, post_cost, L, g, G per element, copy per
 * element, fold per element, large_cost, node_bw (0: none), cpu horizon, net horizon, fault per
 * element, copy_contention (0: none), call (CPU per rank before the tree protocols start; 0: none)]. Lock-step: rank r's steps are ls_rank[r]..ls_rank[r+1]-1, step k's operations
 * ls_step[k]..ls_step[k+1]-1, each 5 values in ls_ops (kind, peer, lo, hi, tag). links + loff[rank]: each rank's packed links (as
 * ac_start takes them); starts[rank]: its start time. cpu_d / cpu_off (per rank) and net_d / net_off
 * (per node): detours. Out: finished[rank] (and finished[size]: the time of the last event, as
 * World.now after World.run); counts = [messages, bytes, events, callbacks, unfinished
 * ranks, unmatched sends, unmatched receives, the missing route's src * size + dst (SIM_ROUTE)].
 * A described network (pip[0] = 1; pathlinks.PathLinks): pip = [1, max-min sharing (else bottleneck),
 * links, routes]; pkeys: the routes' src * size + dst, ascending; route i's links are
 * plinks[poff[i]..poff[i+1]-1] with their weights (cost / the slowest link's cost) in pweights;
 * proute[2i], proute[2i+1]: its latency and its slowest link's cost (s/B); lcost: each link's cost (s/B).
 * Net detours (net_d / net_off) are then per rank. Returns SIM_OK or an error (SIM_*). */
int ac_sim_run(const int64_t *ip, const double *fp, const int32_t *links, const int64_t *loff, const double *starts,
               const double *cpu_d, const int64_t *cpu_off, const double *net_d, const int64_t *net_off,
               const int64_t *ls_rank, const int64_t *ls_step, const int64_t *ls_ops, double *finished,
               int64_t *counts, const int64_t *pip, const int64_t *pkeys, const int64_t *poff, const int32_t *plinks,
               const double *pweights, const double *proute, const double *lcost) {
    memset(&W, 0, sizeof(W));
    W.size = (int)ip[0];
    W.rpn = (int)ip[1];
    W.kind = (int)ip[2];
    W.itemsize = (int)ip[3];
    W.count = ip[4];
    W.seg_count = ip[5];
    W.tag_base = (int)ip[6];
    W.tag_space = (int)ip[7];
    W.send_window = (int)ip[8];
    W.recv_window = (int)ip[9];
    W.sync_mode = (int)ip[10];
    W.ordered = (int)ip[11];
    W.root = (int)ip[12];
    W.eager_elems = ip[13];
    W.large_elems = ip[14] < 0 ? INT64_MAX : ip[14];
    W.pair = (int)ip[15];
    W.cpu_copy = (int)ip[16];
    W.has_cpu = (int)ip[17];
    W.has_net = (int)ip[18];
    W.lockstep = (int)ip[19];
    W.fifo = (int)ip[22];
    W.copy_poll = (int)ip[23];
    W.ls_copy = ip[20];
    W.fault_elems = ip[21];
    W.fault_cost = fp[11];
    W.ls_rank = ls_rank;
    W.ls_step = ls_step;
    W.ls_ops = ls_ops;
    W.event_cost = fp[0];
    W.post_cost = fp[1];
    W.L = fp[2];
    W.g = fp[3];
    W.bytecost = fp[4];
    W.copycost = fp[5];
    W.foldcost = fp[6];
    W.large_cost = fp[7];
    W.node_bw = fp[8];
    W.contention = fp[12];
    W.call_cost = fp[13];
    W.share = W.node_bw > 0 || W.contention > 0;
    W.links = links;
    W.loff = loff;
    W.finished = finished;
    W.nodes = (W.size + W.rpn - 1) / W.rpn;
    W.freemsg = W.freerecv = W.freekey = W.freecb = W.freeent = -1;
    W.path = (int)pip[0];
    int n = W.size, nodes = W.lnodes = W.path ? W.size : W.nodes;
    int path_ok = 1;
    if (W.path) {
        W.maxmin = (int)pip[1];
        W.nlinks = (int)pip[2];
        W.nroutes = (int)pip[3];
        W.pkeys = pkeys;
        W.poff = poff;
        W.plinks = plinks;
        W.pweights = pweights;
        W.proute = proute;
        W.lcost = lcost;
        size_t nl = (size_t)(W.nlinks ? W.nlinks : 1);
        W.on = (ivec *)calloc(nl, sizeof(ivec));
        W.fmine = (ivec *)calloc(nl, sizeof(ivec));
        W.fgen_of = (int64_t *)calloc(nl, sizeof(int64_t));
        W.top_gen = (int64_t *)calloc(nl, sizeof(int64_t));
        W.least_gen = (int64_t *)calloc(nl, sizeof(int64_t));
        W.touch_gen = (int64_t *)calloc(nl, sizeof(int64_t));
        W.froom = (double *)calloc(nl, sizeof(double));
        W.fheld = (double *)calloc(nl, sizeof(double));
        W.top_val = (double *)calloc(nl, sizeof(double));
        W.least_val = (double *)calloc(nl, sizeof(double));
        W.fcount = (int *)calloc(nl, sizeof(int));
        W.dirty_gen = (int64_t *)calloc((size_t)n, sizeof(int64_t));
        path_ok = W.on && W.fmine && W.fgen_of && W.top_gen && W.least_gen && W.touch_gen && W.froom && W.fheld &&
                  W.top_val && W.least_val && W.fcount && W.dirty_gen;
    }
    W.eng = ac_engine_new(1);
    W.qhead = (int *)malloc((size_t)n * sizeof(int));
    W.qtail = (int *)malloc((size_t)n * sizeof(int));
    W.busy = (double *)malloc((size_t)n * sizeof(double));
    W.precv = (pvec *)calloc((size_t)n, sizeof(pvec));
    W.psend = (pvec *)calloc((size_t)n, sizeof(pvec));
    W.ops = (ac_op **)calloc((size_t)n, sizeof(ac_op *));
    if (W.lockstep) W.ls = (struct ls_rank *)calloc((size_t)n, sizeof(struct ls_rank));
    W.out = (ivec *)calloc((size_t)nodes, sizeof(ivec));
    W.inn = (ivec *)calloc((size_t)nodes, sizeof(ivec));
    W.lkey = (int64_t *)malloc((size_t)nodes * sizeof(int64_t));
    W.lkt = (double *)malloc((size_t)nodes * sizeof(double));
    W.out_free = (double *)calloc((size_t)nodes, sizeof(double));
    W.in_free = (double *)calloc((size_t)nodes, sizeof(double));
    W.lmsg = (int *)malloc((size_t)nodes * sizeof(int));
    W.lpos = (int *)malloc((size_t)nodes * sizeof(int));
    W.lheap = (int *)malloc((size_t)nodes * sizeof(int));
    W.last_start = (double *)calloc((size_t)nodes, sizeof(double));
    W.has_last = (unsigned char *)calloc((size_t)nodes, 1);
    int cnodes = W.ncopynodes = W.rpn > 1 ? nodes : 1;
    W.copies = (double **)calloc((size_t)cnodes, sizeof(double *));
    W.ncopies = (int *)calloc((size_t)cnodes, sizeof(int));
    W.capcopies = (int *)calloc((size_t)cnodes, sizeof(int));
    W.nbuckets = 1024;
    W.buckets = (int *)malloc((size_t)W.nbuckets * sizeof(int));
    if (W.has_cpu) {
        W.cpu.d = cpu_d;
        W.cpu.off = cpu_off;
        W.cpu.horizon = fp[9];
        W.cpu.cur = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    }
    if (W.has_net) {
        W.net.d = net_d;
        W.net.off = net_off;
        W.net.horizon = fp[10];
        W.net.cur = (int64_t *)malloc((size_t)nodes * sizeof(int64_t));
    }
    if (!path_ok || (W.lockstep && !W.ls) || !W.eng || !W.qhead || !W.qtail || !W.busy || !W.precv || !W.psend || !W.ops || !W.out || !W.inn || !W.lkey || !W.lkt || !W.out_free || !W.in_free || !W.lmsg || !W.lpos || !W.lheap || !W.last_start ||
        !W.has_last || !W.copies || !W.ncopies || !W.capcopies || !W.buckets || (W.has_cpu && !W.cpu.cur) ||
        (W.has_net && !W.net.cur)) {
        cleanup();
        return SIM_NOMEM;
    }
    for (int i = 0; i < W.nbuckets; i++) W.buckets[i] = -1;
    for (int r = 0; r < n; r++) {
        W.qhead[r] = W.qtail[r] = -1;
        W.busy[r] = -INFINITY;
        finished[r] = -1.0;
    }
    for (int i = 0; i < nodes; i++) W.lkey[i] = W.lpos[i] = -1;
    if (W.has_cpu)
        for (int r = 0; r < n; r++) W.cpu.cur[r] = cpu_off[r];
    if (W.has_net)
        for (int i = 0; i < nodes; i++) W.net.cur[i] = net_off[i];
    W.left = n;
    W.cur = -1;
    W.latest = 0.0;
    for (int r = 0; r < n; r++) push(starts[r], EV_START, r, 0);
    int64_t popped = 0;
    while ((W.nheap || W.nlheap) && !W.err) {
        if (W.nlheap) {
            int node = W.lheap[0];
            if (!W.nheap || W.lkt[node] < W.heap[0].t || (W.lkt[node] == W.heap[0].t && W.lkey[node] < W.heap[0].seq)) {
                W.now = W.lkt[node];
                popped++;
                finish(lh_pop());
                continue;
            }
        }
        ev_t e = pop();
        W.now = e.t;
        popped++;
        switch (e.type) {
        case EV_START: complete_on(e.a, 1, NULL); break;
        case EV_WAKE: wake(e.a); break;
        case EV_READY: ready((int)e.b); break;
        case EV_DEPART: depart((int)e.b); break;
        case EV_BEGIN: begin((int)e.b); break;
        case EV_ARRIVE: arrive((int)e.b); break;
        case EV_EAGER_SENT: eager_sent((int)e.b); break;
        case EV_LATE_RECV: deliver((int)e.b); break;
        case EV_PAIR_NEXT: pair_next(e.a, (int)e.b); break;
        case EV_LEAVE: fifo_leave((int)e.b); break;
        }
    }
    int64_t sends = 0, recvs = 0;
    for (int r = 0; r < n; r++) {
        sends += W.psend[r].n;
        recvs += W.precv[r].n;
    }
    finished[n] = W.latest > W.now ? W.latest : W.now;
    counts[0] = W.messages;
    counts[1] = W.bytes;
    counts[2] = popped + W.dropped;
    counts[3] = W.callbacks;
    counts[4] = W.left;
    counts[5] = sends;
    counts[6] = recvs;
    counts[7] = W.miss;
    int rc = W.err ? W.err : W.overflow ? SIM_HORIZON : W.left ? SIM_DEADLOCK : SIM_OK;
    cleanup();
    return rc;
}
