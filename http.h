/* http.h — serve mode's HTTP side: libmicrohttpd (a thread per
 * connection) accepts requests, checks keys and origins, answers the
 * introspection endpoints itself (health, models, props, metrics,
 * tokenize, detokenize, the chat page), checks and tokenizes generation
 * requests (openai.h) and hands them to the one compute thread through a
 * bounded queue; the compute thread hands back response text (srv_emit,
 * srv_finish) that the connection's thread sends.
 *
 * Bounds on what a client controls: the body (max_body, 413), the header
 * block (64 KB, 431), connections at once (max_conns; beyond them a new
 * one waits in the listen backlog) and per address (max_conns_ip; beyond
 * them the request is answered 429 and the connection closed), the time a whole
 * request (headers and body) may take to arrive (timeout_s from the
 * moment the connection is ready for it: 408 and closed, by a watchdog
 * thread, so a client trickling bytes cannot hold a connection), the
 * queue (max_queue waiting requests, 429), messages per request and the
 * prompt against the context (400; max_tokens is clamped to the room
 * left). A client that goes away cancels its request (srv_job.cancel,
 * checked by the compute thread at every token). Every error body is
 * JSON in the protocol's shape (OpenAI's, or Anthropic's on /v1/messages).
 *
 * Built with COLI_HAVE_MHD only (the Makefile detects libmicrohttpd);
 * without it srv_start says so. Prefix: srv_. Must not: read the
 * environment or touch the model. */
#ifndef COLI_HTTP_H
#define COLI_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anthropic.h"
#include "openai.h"
#include "responses.h"
#include "tok.h"

/* The protocol a generation request speaks: OpenAI's chat completions and
 * completions, Anthropic's Messages, OpenAI's Responses (the last two
 * translated into a chat request: anthropic.h, responses.h). */
enum { SRV_CHAT, SRV_COMPLETIONS, SRV_MESSAGES, SRV_RESPONSES };

/* previous_response_id's store: the conversations of this many responses,
 * within this many bytes, the least recently used forgotten first. */
#define SRV_RESP_ITEMS 1024
#define SRV_RESP_BYTES ((size_t)64 << 20)

typedef struct srv_job srv_job;
struct srv_job {
    oai_req req;
    ant_req ant;     /* SRV_MESSAGES: the Anthropic request's translation */
    resp_req rr;     /* SRV_RESPONSES: the Responses request's translation */
    tok_ids ids;     /* the prompt's ids */
    int api;         /* SRV_* */
    int max_new;     /* tokens to generate at most: max_tokens clamped to the room the prompt leaves */
    char id[48];     /* "chatcmpl-...", "cmpl-...", "msg_...", "resp_..." */
    long long created;
    atomic_int cancel; /* the client went away, or the server is stopping */
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    jw out;          /* streaming: events; else the whole body once done */
    size_t sent;
    int status, done;
    int refs;        /* guarded by the server's mu */
    srv_job *next;
};

typedef struct {
    const char *host;
    int port;          /* 0: any free port (srv.port says which) */
    int max_conns, max_conns_ip, max_queue, timeout_s, max_messages;
    size_t max_body;
    int ctx;           /* the model's context */
    const char *model; /* the name /v1/models lists */
    const char *fingerprint;
    int chat_fmt;      /* the model's chat format (chat.h CHAT_*): how requests render */
    const char *const *keys; /* API keys a request must carry one of (Bearer or x-api-key); none: open */
    int n_keys;
    const char *cors;  /* origins allowed to call from a browser: NULL none, "*" any, else a comma-separated list */
    const char *props; /* GET /props's document (JSON) */
} srv_opts;

/* Endpoints, for the request counters of /metrics. */
enum { SRV_EP_CHAT, SRV_EP_COMPLETIONS, SRV_EP_MESSAGES, SRV_EP_COUNT_TOKENS, SRV_EP_RESPONSES, SRV_EP_MODELS, SRV_EP_HEALTH, SRV_EP_PROPS,
       SRV_EP_METRICS, SRV_EP_TOKENIZE, SRV_EP_DETOKENIZE, SRV_EP_PAGE, SRV_EP_PREFLIGHT, SRV_EP_OTHER, SRV_EP_N };
static const char *const srv_ep_names_[SRV_EP_N] = {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                                                    "/v1/responses", "/v1/models", "/health", "/props", "/metrics", "/tokenize", "/detokenize", "/",
                                                    "OPTIONS", "other"};
/* Statuses counted one by one; others as "other". */
static const int srv_statuses_[] = {200, 204, 400, 401, 403, 404, 405, 408, 413, 429, 431, 500, 503};
#define SRV_NSTATUS ((int)(sizeof srv_statuses_ / sizeof srv_statuses_[0]) + 1)

/* Histogram bucket bounds, seconds: time to first token, time per output
 * token. */
static const double srv_ttft_le_[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double srv_tpot_le_[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define SRV_TTFT_N ((int)(sizeof srv_ttft_le_ / sizeof srv_ttft_le_[0]))
#define SRV_TPOT_N ((int)(sizeof srv_tpot_le_ / sizeof srv_tpot_le_[0]))

/* What one answered generation request cost (srv_note). */
typedef struct {
    int prompt_tokens, cached_tokens, generated_tokens;
    double ttft_s;   /* < 0: no token was generated */
    double decode_s; /* from the first token to the last */
    long forwards, sequences; /* decoding forwards, and the sequences they advanced */
    uint64_t hit_gpu, hit_pin, hit_lru, miss, disk_bytes; /* routed expert lookups, bytes read from disk */
} srv_gen_stats;

/* The compute side's totals (srv_note), guarded by the server's mu. */
typedef struct {
    uint64_t prompt_tokens, cached_tokens, generated_tokens, requests;
    uint64_t ttft[SRV_TTFT_N + 1], tpot[SRV_TPOT_N + 1]; /* per bucket; the last is +Inf */
    double ttft_sum, tpot_sum;
    uint64_t ttft_count, tpot_count;
    uint64_t forwards, sequences;
    uint64_t hit_gpu, hit_pin, hit_lru, miss, disk_bytes;
    int running; /* requests being computed (in a slot) */
} srv_totals;

typedef struct {
    srv_opts o;
    const tok *t;
    void *daemon;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *head, *tail;
    int queued;
    atomic_int stopping;
    atomic_int active; /* requests between the handler's first call and MHD's completion notice */
    atomic_llong served, refused_busy;
    atomic_llong counts[SRV_EP_N][SRV_NSTATUS];
    srv_totals tot;
    resp_store rs; /* previous_response_id's conversations: HTTP threads read, the compute thread writes */
    int rs_ok;
    uint64_t seq;
    double started;
    /* connections, for the request deadline (srv_watch_) */
    pthread_mutex_t cmu;
    void *socks;
    pthread_t watcher;
    int watching;
} srv;

static inline void srv_job_free_(srv_job *j) {
    oai_req_free(&j->req);
    ant_req_free(&j->ant);
    resp_req_free(&j->rr);
    tok_ids_free(&j->ids);
    jw_free(&j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Drops one reference (the connection's or the compute thread's). */
static inline void srv_release(srv *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) srv_job_free_(j);
}

/* The compute thread's next request: waits up to timeout_ms; NULL on a
 * timeout or when the server is stopping. */
static inline srv_job *srv_next(srv *s, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000, ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->mu);
    while (!s->head && !atomic_load(&s->stopping))
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts)) break;
    srv_job *j = atomic_load(&s->stopping) ? NULL : s->head;
    if (j) {
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->queued--;
        s->tot.running++;
    }
    pthread_mutex_unlock(&s->mu);
    return j;
}

/* The compute thread's account of a request it answered (the totals of
 * /metrics). */
static inline void srv_note(srv *s, const srv_gen_stats *g) {
    pthread_mutex_lock(&s->mu);
    srv_totals *t = &s->tot;
    t->running -= t->running > 0, t->requests++;
    t->prompt_tokens += (uint64_t)g->prompt_tokens, t->cached_tokens += (uint64_t)g->cached_tokens;
    t->generated_tokens += (uint64_t)g->generated_tokens;
    if (g->ttft_s >= 0) {
        int b = 0;
        while (b < SRV_TTFT_N && g->ttft_s > srv_ttft_le_[b]) b++;
        t->ttft[b]++, t->ttft_sum += g->ttft_s, t->ttft_count++;
    }
    if (g->generated_tokens > 1) { /* the mean gap between tokens, once per gap */
        double per = g->decode_s / (g->generated_tokens - 1);
        int b = 0;
        while (b < SRV_TPOT_N && per > srv_tpot_le_[b]) b++;
        t->tpot[b] += (uint64_t)(g->generated_tokens - 1), t->tpot_sum += g->decode_s, t->tpot_count += (uint64_t)(g->generated_tokens - 1);
    }
    t->forwards += (uint64_t)g->forwards, t->sequences += (uint64_t)g->sequences;
    t->hit_gpu += g->hit_gpu, t->hit_pin += g->hit_pin, t->hit_lru += g->hit_lru, t->miss += g->miss, t->disk_bytes += g->disk_bytes;
    pthread_mutex_unlock(&s->mu);
}

/* The compute thread's account of one forward that advanced `sequences`
 * decoding sequences (none: a forward of prompts alone, not counted). */
static inline void srv_note_forward(srv *s, int sequences) {
    if (sequences < 1) return;
    pthread_mutex_lock(&s->mu);
    s->tot.forwards++, s->tot.sequences += (uint64_t)sequences;
    pthread_mutex_unlock(&s->mu);
}

/* The compute thread's account of the experts one forward looked up and
 * read (g's hit, miss and disk fields; its other fields are ignored):
 * shared by the requests in it, so counted once. */
static inline void srv_note_engine(srv *s, const srv_gen_stats *g) {
    pthread_mutex_lock(&s->mu);
    srv_totals *t = &s->tot;
    t->hit_gpu += g->hit_gpu, t->hit_pin += g->hit_pin, t->hit_lru += g->hit_lru, t->miss += g->miss, t->disk_bytes += g->disk_bytes;
    pthread_mutex_unlock(&s->mu);
}

/* Appends response bytes (streaming events) for the connection to send. */
static inline void srv_emit(srv_job *j, const char *p, size_t n) {
    pthread_mutex_lock(&j->mu);
    jw_raw(&j->out, p, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Ends a request: a non-streaming one's status and body (taken over), or
 * a streaming one's last events. */
static inline void srv_finish(srv_job *j, int status, jw *body) {
    pthread_mutex_lock(&j->mu);
    if (body) {
        if (j->req.stream) jw_raw(&j->out, body->s ? body->s : "", body->n), jw_free(body);
        else jw_free(&j->out), j->out = *body, memset(body, 0, sizeof *body);
    }
    j->status = status, j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* An error of a generation request that has sent nothing yet, in its
 * protocol's shape: the document, or for a stream (its 200 already sent)
 * the error events that end it. type is OpenAI's ("invalid_request_error",
 * "server_error"); Anthropic's follows from the status. */
static inline void srv_error_body(jw *w, const srv_job *j, const char *model, int status, const char *msg, const char *type, const char *param) {
    if (j->api == SRV_MESSAGES) {
        if (j->req.stream) ant_stream_error(w, ant_error_type(status), msg);
        else ant_error_json(w, ant_error_type(status), msg);
    } else if (j->api == SRV_RESPONSES && j->req.stream) {
        resp_stream st;
        oai_reply y;
        memset(&y, 0, sizeof y);
        y.id = j->id, y.model = model, y.created = j->created;
        resp_stream_start(&st, w, &j->rr, &y);
        resp_stream_error(&st, w, &j->rr, &y, msg);
        resp_stream_free(&st);
    } else {
        if (j->req.stream) jw_lit(w, "data: ");
        oai_error_json(w, msg, type, param, NULL);
        if (j->req.stream) jw_lit(w, "\n\ndata: [DONE]\n\n");
    }
}

/* Ends a request that has sent nothing with an error: its status (a
 * non-streaming request) or the error events (a stream, whose status was
 * 200). */
static inline void srv_fail(srv_job *j, const char *model, int status, const char *msg, const char *type, const char *param) {
    jw w = {0};
    srv_error_body(&w, j, model, status, msg, type, param);
    srv_finish(j, status, &w);
    jw_free(&w);
}

#ifdef COLI_HAVE_MHD
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "webui.h"

/* On stop, answers already owed are sent for up to 5 s (a client that
 * stopped reading is not waited for longer); requests that reached the
 * socket before it closed are given 100 ms to be read. */
#define SRV_DRAIN_MS 5000
#define SRV_SETTLE_MS 100
/* The header block a request may carry; libmicrohttpd's own pool is
 * larger (SRV_MHD_POOL), so a larger block gets this server's JSON 431
 * and only one past the pool gets libmicrohttpd's page. */
#define SRV_MAX_HEADERS 65536
#define SRV_MHD_POOL (1u << 20)

/* A connection, for the request deadline: when it became ready for a
 * request, and whether one is being answered. Guarded by srv.cmu; the
 * record lives from MHD's connection-start notice to its close notice,
 * which comes before the socket is closed, so fd is never a reused one. */
typedef struct srv_sock_ {
    int fd;
    double ready;  /* opened, or the last answer finished */
    int busy;      /* a whole request arrived: no deadline while it is answered */
    int line;      /* the current request's first line arrived */
    int expired;   /* the watchdog closed it */
    int over;      /* opened while its address held max_conns_ip others: 429 */
    unsigned char addr[17]; /* the peer's address: family, then 4 or 16 bytes */
    struct srv_sock_ *prev, *next;
} srv_sock_;

/* Per-request state while a request arrives and is answered. */
typedef struct {
    jw body;
    int too_big;
    int headed;    /* the handler saw the headers */
    int ep;        /* SRV_EP_* */
    const char *origin; /* the allowed Origin of a browser request, or NULL */
} srv_conn_;

static inline double srv_now_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 1 when the peer of fd has closed (or reset) its side. */
static inline int srv_peer_gone_(int fd) {
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return 1;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static inline int srv_conn_fd_(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static inline srv_sock_ *srv_sock_of_(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (srv_sock_ *)ci->socket_context : NULL;
}

static inline int srv_status_slot_(unsigned status) {
    for (int i = 0; i < SRV_NSTATUS - 1; i++)
        if ((unsigned)srv_statuses_[i] == status) return i;
    return SRV_NSTATUS - 1;
}

/* Whether origin is one of the allowed ones (o->cors: "*" or a
 * comma-separated list, compared exactly). */
static inline int srv_origin_ok_(const char *cors, const char *origin) {
    if (!cors || !origin || !*origin) return 0;
    if (!strcmp(cors, "*")) return 1;
    size_t n = strlen(origin);
    for (const char *p = cors; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        while (l && (*p == ' ')) p++, l--;
        while (l && p[l - 1] == ' ') l--;
        if (l == n && !memcmp(p, origin, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static inline void srv_cors_(const srv *s, const srv_conn_ *cs, struct MHD_Response *r) {
    if (!cs || !cs->origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", !strcmp(s->o.cors, "*") ? "*" : cs->origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

/* Queues a response, counting it for /metrics and adding the CORS
 * headers the request's origin earns. */
static inline enum MHD_Result srv_queue_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    srv_cors_(s, cs, r);
    atomic_fetch_add(&s->counts[cs ? cs->ep : SRV_EP_OTHER][srv_status_slot_(status)], 1);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static inline enum MHD_Result srv_reply_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, unsigned status, const char *type, const char *body, size_t n) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    return srv_queue_(s, cs, c, status, r);
}

static inline enum MHD_Result srv_json_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, unsigned status, jw *w) {
    enum MHD_Result rc = w->oom ? MHD_NO : srv_reply_(s, cs, c, status, "application/json", w->s, w->n);
    jw_free(w);
    return rc;
}

/* The body of an error in the endpoint's protocol's shape: Anthropic's
 * on /v1/messages, else OpenAI's. */
static inline void srv_error_body_(jw *w, const srv_conn_ *cs, unsigned status, const char *msg, const char *type, const char *param, const char *code) {
    if (cs && (cs->ep == SRV_EP_MESSAGES || cs->ep == SRV_EP_COUNT_TOKENS)) ant_error_json(w, ant_error_type((int)status), msg);
    else oai_error_json(w, msg, type, param, code);
}

/* An error in OpenAI's shape; param names the field at fault, code the
 * short code where one fits. */
static inline enum MHD_Result srv_error_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, unsigned status, const char *msg, const char *type,
                                         const char *param, const char *code) {
    jw w = {0};
    srv_error_body_(&w, cs, status, msg, type, param, code);
    return srv_json_(s, cs, c, status, &w);
}

/* ------------------------------------------------------------ deadlines */

/* The peer's address of c as a fixed-size key (family, then its bytes);
 * all zero when MHD does not say. */
static inline void srv_addr_key_(struct MHD_Connection *c, unsigned char key[17]) {
    memset(key, 0, 17);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) key[0] = 4, memcpy(key + 1, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    else if (sa && sa->sa_family == AF_INET6) key[0] = 6, memcpy(key + 1, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
}

/* MHD's connection notices: a record per connection (srv_sock_). The
 * per-address limit is counted here rather than left to MHD, which resets
 * a connection past it: a client is told 429 with the limit's name. */
static inline void srv_notify_conn_(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    srv *s = (srv *)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_sock_ *k = (srv_sock_ *)calloc(1, sizeof *k);
        *socket_context = k;
        if (!k) return; /* no deadline for this one; MHD's idle timeout still applies */
        k->fd = srv_conn_fd_(c), k->ready = srv_now_();
        srv_addr_key_(c, k->addr);
        pthread_mutex_lock(&s->cmu);
        int same = 0;
        for (srv_sock_ *o = (srv_sock_ *)s->socks; o; o = o->next) same += !o->over && !memcmp(o->addr, k->addr, sizeof k->addr);
        k->over = same >= s->o.max_conns_ip;
        k->next = (srv_sock_ *)s->socks;
        if (k->next) k->next->prev = k;
        s->socks = k;
        pthread_mutex_unlock(&s->cmu);
    } else if (*socket_context) {
        srv_sock_ *k = (srv_sock_ *)*socket_context;
        pthread_mutex_lock(&s->cmu);
        if (k->prev) k->prev->next = k->next;
        else s->socks = k->next;
        if (k->next) k->next->prev = k->prev;
        pthread_mutex_unlock(&s->cmu);
        free(k);
        *socket_context = NULL;
    }
}

/* MHD's first-line notice: a request started on this connection. Returns
 * the request's state (srv_conn_), which the handler receives. */
static inline void *srv_uri_(void *cls, const char *uri, struct MHD_Connection *c) {
    srv *s = (srv *)cls;
    (void)uri;
    srv_sock_ *k = srv_sock_of_(c);
    if (k) {
        pthread_mutex_lock(&s->cmu);
        k->line = 1;
        pthread_mutex_unlock(&s->cmu);
    }
    srv_conn_ *cs = (srv_conn_ *)calloc(1, sizeof *cs);
    if (cs) atomic_fetch_add(&s->active, 1);
    return cs;
}

/* Marks the connection's request as wholly arrived (busy 1) or answered
 * (busy 0: the next one's deadline starts now). */
static inline void srv_sock_busy_(srv *s, struct MHD_Connection *c, int busy) {
    srv_sock_ *k = srv_sock_of_(c);
    if (!k) return;
    pthread_mutex_lock(&s->cmu);
    k->busy = busy;
    if (!busy) k->ready = srv_now_(), k->line = 0;
    pthread_mutex_unlock(&s->cmu);
}

/* Whether c opened while its address held max_conns_ip connections. */
static inline int srv_sock_over_(srv *s, struct MHD_Connection *c) {
    srv_sock_ *k = srv_sock_of_(c);
    if (!k) return 0;
    pthread_mutex_lock(&s->cmu);
    int over = k->over;
    pthread_mutex_unlock(&s->cmu);
    return over;
}

/* 429 for a connection past its address's limit, closing it after. */
static inline enum MHD_Result srv_too_many_(srv *s, srv_conn_ *cs, struct MHD_Connection *c) {
    char msg[200];
    snprintf(msg, sizeof msg, "this client address already holds %d connections (SERVE_CONNS_PER_IP): close one, or retry later", s->o.max_conns_ip);
    jw w = {0};
    srv_error_body_(&w, cs, 429, msg, "rate_limit_error", NULL, "too_many_connections");
    struct MHD_Response *r = w.oom ? NULL : MHD_create_response_from_buffer(w.n, w.s, MHD_RESPMEM_MUST_COPY);
    jw_free(&w);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Connection", "close");
    MHD_add_response_header(r, "Retry-After", "1");
    return srv_queue_(s, cs, c, 429, r);
}

/* The watchdog: every 100 ms, a connection whose request has not wholly
 * arrived within timeout_s of the connection being ready for it is
 * answered 408 (when its first line came; else just closed, as an idle
 * one) and shut down, which ends MHD's read on it. */
static inline void *srv_watch_(void *arg) {
    srv *s = (srv *)arg;
    jw body = {0}, msg = {0}; /* the whole answer, sent with one call */
    oai_error_json(&body, "the request did not arrive in time (SERVE_TIMEOUT): the connection is closed", "invalid_request_error", NULL, "request_timeout");
    char head[256];
    snprintf(head, sizeof head, "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", body.n);
    jw_lit(&msg, head), jw_raw(&msg, body.s ? body.s : "", body.n);
    while (!atomic_load(&s->stopping)) {
        struct timespec t = {0, 100000000L};
        nanosleep(&t, NULL);
        double now = srv_now_();
        pthread_mutex_lock(&s->cmu);
        for (srv_sock_ *k = (srv_sock_ *)s->socks; k; k = k->next) {
            if (k->busy || k->expired || k->fd < 0 || now - k->ready < s->o.timeout_s) continue;
            if (k->line && msg.s) {
                if (send(k->fd, msg.s, msg.n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* the client is gone: nothing to tell it */ }
                atomic_fetch_add(&s->counts[SRV_EP_OTHER][srv_status_slot_(408)], 1);
            }
            shutdown(k->fd, SHUT_RDWR);
            k->expired = 1;
        }
        pthread_mutex_unlock(&s->cmu);
    }
    jw_free(&body), jw_free(&msg);
    return NULL;
}

/* ------------------------------------------------------------ keys */

/* Whether the request carries one of the keys: "Authorization: Bearer K"
 * or "x-api-key: K", compared in time independent of where they differ. */
static inline int srv_authorized_(const srv *s, struct MHD_Connection *c) {
    if (!s->o.n_keys) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), *k = NULL;
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        k = a + 7;
        while (*k == ' ') k++;
    }
    if (!k) k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (!k) return 0;
    size_t n = strlen(k);
    int ok = 0;
    for (int i = 0; i < s->o.n_keys; i++) {
        const char *key = s->o.keys[i];
        size_t kn = strlen(key);
        unsigned char diff = (unsigned char)(kn != n);
        for (size_t b = 0; b < kn; b++) diff |= (unsigned char)(key[b] ^ (b < n ? k[b] : 0));
        ok |= !diff;
    }
    return ok;
}

/* ------------------------------------------------------------ generation */

typedef struct {
    srv *s;
    srv_job *j;
    int fd;
} srv_stream_;

static inline void srv_stream_free_(void *cls) {
    srv_stream_ *st = (srv_stream_ *)cls;
    atomic_store(&st->j->cancel, 1); /* done already, or the client left */
    srv_release(st->s, st->j);
    free(st);
}

/* Streaming: hands out events as the compute thread appends them. Blocks
 * (a thread per connection), checking every 200 ms that the client is
 * still there; one that went away cancels the request. */
static inline ssize_t srv_stream_cb_(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_stream_ *st = (srv_stream_ *)cls;
    srv_job *j = st->j;
    pthread_mutex_lock(&j->mu);
    while (j->sent == j->out.n && !j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (j->sent == j->out.n && !j->done && st->fd >= 0 && srv_peer_gone_(st->fd)) {
            atomic_store(&j->cancel, 1);
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    ssize_t n;
    if (j->sent < j->out.n) {
        n = (ssize_t)(j->out.n - j->sent < max ? j->out.n - j->sent : max);
        memcpy(buf, j->out.s + j->sent, (size_t)n);
        j->sent += (size_t)n;
    } else
        n = MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_unlock(&j->mu);
    return n;
}

/* Queues j for the compute thread. 0, 429 (queue full) or 503 (stopping). */
static inline int srv_enqueue_(srv *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    int rc = atomic_load(&s->stopping) ? 503 : s->queued >= s->o.max_queue ? 429 : 0;
    if (!rc) {
        j->refs = 2;
        if (s->tail) s->tail->next = j;
        else s->head = j;
        s->tail = j, s->queued++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Tokenizes a checked request and fits it to the context: the prompt must
 * leave room for one token; max_tokens is clamped to the room left.
 * 0, or the status with e saying why (*code: OpenAI's short code). */
static inline int srv_prepare_(srv *s, srv_job *j, oai_err *e, const char **code) {
    const char *what = j->api == SRV_RESPONSES ? "input" : j->req.chat ? "messages" : "prompt";
    if (j->req.ids) {
        for (int i = 0; i < j->req.n_ids; i++)
            if (j->req.ids[i] >= tok_n_ids(s->t)) return oai_fail_(e, what, "prompt: token id %d is not one of this model's (0 to %d)", j->req.ids[i], tok_n_ids(s->t) - 1), 400;
        if (tok_ids_append(&j->ids, j->req.ids, (size_t)j->req.n_ids)) return oai_fail_(e, NULL, "out of memory"), 500;
    } else if (tok_encode(s->t, j->req.text, j->req.text_len, &j->ids))
        return oai_fail_(e, what, "the prompt could not be tokenized (out of memory, or longer than the tokenizer accepts)"), 400;
    if (!j->ids.n) return oai_fail_(e, what, "the prompt is empty"), 400;
    if ((int)j->ids.n >= s->o.ctx)
        return *code = "context_length_exceeded", oai_fail_(e, what, "the prompt has %zu tokens and the context is %d (CTX): no room for an answer", j->ids.n, s->o.ctx), 400;
    for (size_t i = 0; i < j->ids.n; i++)
        if (j->ids.ids[i] < 0) return oai_fail_(e, what, "the prompt has a token outside the vocabulary"), 400;
    int room = s->o.ctx - (int)j->ids.n;
    j->max_new = j->req.max_tokens && j->req.max_tokens < room ? j->req.max_tokens : room;
    return 0;
}

/* Checks a generation request of j->api into j->req: OpenAI's bodies
 * directly, Anthropic's and the Responses API's translated into a chat
 * body first (their refusals name their own fields). 0, or -1 with e. */
static inline int srv_parse_(srv *s, srv_job *j, const char *body, size_t len, const oai_limits *lim, oai_err *e) {
    if (j->api == SRV_MESSAGES) {
        if (ant_parse(body, len, ANT_MESSAGES, lim, &j->ant, e->msg, sizeof e->msg, e->param, sizeof e->param)) return -1;
        return oai_parse(j->ant.chat.s, j->ant.chat.n, 1, lim, &j->req, e);
    }
    if (j->api == SRV_RESPONSES) {
        if (resp_parse(body, len, lim, s->rs_ok ? &s->rs : NULL, &j->rr, e->msg, sizeof e->msg, e->param, sizeof e->param)) return -1;
        return oai_parse(j->rr.chat.s, j->rr.chat.n, 1, lim, &j->req, e);
    }
    return oai_parse(body, len, j->api == SRV_CHAT, lim, &j->req, e);
}

/* POST /v1/messages/count_tokens: the prompt's tokens as the request would
 * render, nothing generated. */
static inline enum MHD_Result srv_count_tokens_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, const char *body, size_t len) {
    oai_err e = {{0}, {0}};
    oai_limits lim = {s->o.max_messages, s->o.ctx, s->o.chat_fmt};
    ant_req q;
    oai_req r;
    memset(&r, 0, sizeof r);
    tok_ids ids = {0};
    int bad = ant_parse(body, len, ANT_COUNT_TOKENS, &lim, &q, e.msg, sizeof e.msg, e.param, sizeof e.param) ||
              oai_parse(q.chat.s, q.chat.n, 1, &lim, &r, &e);
    int tk = !bad && tok_encode(s->t, r.text, r.text_len, &ids);
    ant_req_free(&q), oai_req_free(&r);
    if (bad || tk) {
        tok_ids_free(&ids);
        return srv_error_(s, cs, c, 400, bad ? e.msg : "the prompt could not be tokenized", "invalid_request_error", e.param, NULL);
    }
    jw w = {0};
    ant_count_json(&w, (int)ids.n);
    tok_ids_free(&ids);
    return srv_json_(s, cs, c, 200, &w);
}

static inline enum MHD_Result srv_generate_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, int api, const char *body, size_t len) {
    oai_err e = {{0}, {0}};
    oai_limits lim = {s->o.max_messages, s->o.ctx, s->o.chat_fmt};
    srv_job *j = (srv_job *)calloc(1, sizeof *j);
    if (!j) return srv_error_(s, cs, c, 500, "out of memory", "server_error", NULL, NULL);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->api = api;
    const char *code = NULL;
    int st = srv_parse_(s, j, body, len, &lim, &e) ? 400 : srv_prepare_(s, j, &e, &code);
    if (st) {
        srv_job_free_(j);
        return srv_error_(s, cs, c, (unsigned)st, e.msg, st == 500 ? "server_error" : "invalid_request_error", e.param, code);
    }
    pthread_mutex_lock(&s->mu);
    uint64_t seq = ++s->seq;
    pthread_mutex_unlock(&s->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    j->created = (long long)ts.tv_sec;
    static const char *const prefix[] = {"chatcmpl-", "cmpl-", "msg_", "resp_"};
    snprintf(j->id, sizeof j->id, "%s%llx%04llx", prefix[api], (unsigned long long)ts.tv_sec, (unsigned long long)(seq & 0xffff));
    int q = srv_enqueue_(s, j);
    if (q) {
        srv_job_free_(j);
        if (q == 429) atomic_fetch_add(&s->refused_busy, 1);
        return srv_error_(s, cs, c, (unsigned)q, q == 429 ? "the server is busy: the request queue is full; retry later" : "the server is shutting down",
                          q == 429 ? "rate_limit_error" : "server_error", NULL, NULL);
    }
    atomic_fetch_add(&s->served, 1);
    int fd = srv_conn_fd_(c);
    if (j->req.stream) {
        srv_stream_ *sm = (srv_stream_ *)malloc(sizeof *sm);
        struct MHD_Response *resp = sm ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, srv_stream_cb_, sm, srv_stream_free_) : NULL;
        if (!resp) {
            free(sm);
            atomic_store(&j->cancel, 1);
            srv_release(s, j);
            return MHD_NO;
        }
        sm->s = s, sm->j = j, sm->fd = fd;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        return srv_queue_(s, cs, c, 200, resp);
    }
    /* not streaming: wait for the whole answer, watching the client */
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        struct timespec w;
        clock_gettime(CLOCK_REALTIME, &w);
        w.tv_nsec += 200000000L;
        if (w.tv_nsec >= 1000000000L) w.tv_sec++, w.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &w);
        if (!j->done && fd >= 0 && srv_peer_gone_(fd)) atomic_store(&j->cancel, 1);
    }
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result rc = atomic_load(&j->cancel) && !j->out.n
                             ? MHD_NO
                             : srv_reply_(s, cs, c, (unsigned)j->status, "application/json", j->out.s ? j->out.s : "", j->out.n);
    srv_release(s, j);
    return rc;
}

/* ------------------------------------------------------------ introspection */

static inline void srv_model_obj_(jw *w, const srv *s) {
    jw_lit(w, "{\"id\":");
    jw_str(w, s->o.model);
    jw_lit(w, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"colibri\",\"meta\":{\"n_ctx\":");
    jw_int(w, s->o.ctx);
    jw_lit(w, "}}");
}

/* GET /v1/models, or /v1/models/{id} (id NULL: the list). */
static inline enum MHD_Result srv_models_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, const char *id) {
    jw w = {0};
    size_t n = id ? strlen(id) : 0;
    while (n > 1 && id[n - 1] == '/') n--;
    if (id && (n != strlen(s->o.model) || memcmp(id, s->o.model, n))) {
        char msg[400];
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist: this server serves '%.150s'", id, s->o.model);
        return srv_error_(s, cs, c, 404, msg, "invalid_request_error", "model", "model_not_found");
    }
    if (!id) jw_lit(&w, "{\"object\":\"list\",\"data\":[");
    srv_model_obj_(&w, s);
    if (!id) jw_lit(&w, "]}");
    return srv_json_(s, cs, c, 200, &w);
}

/* POST /tokenize {"content": text, "with_pieces": bool}: {"tokens": ids},
 * or with pieces [{"id", "piece"}] (a piece that is not whole UTF-8 is
 * given as its bytes, as llama-server does). */
static inline enum MHD_Result srv_tokenize_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, const char *body, size_t len) {
    char jerr[160];
    js_doc *d = js_parse(body, len, jerr, sizeof jerr);
    int o = d ? d->root : -1, ct = js_get(d, o, "content"), wp = 0;
    if (!d || js_typeof(d, o) != JS_OBJ) {
        js_free(d);
        return srv_error_(s, cs, c, 400, d ? "the body must be a JSON object" : jerr, "invalid_request_error", NULL, NULL);
    }
    for (int f = js_first(d, o); f >= 0; f = js_next(d, f))
        if (strcmp(js_key(d, f), "content") && strcmp(js_key(d, f), "with_pieces") && strcmp(js_key(d, f), "add_special")) {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown field \"%.100s\" (content, with_pieces, add_special)", js_key(d, f));
            enum MHD_Result rc = srv_error_(s, cs, c, 400, msg, "invalid_request_error", js_key(d, f), NULL);
            js_free(d);
            return rc;
        }
    int i = js_get(d, o, "with_pieces");
    if (js_typeof(d, ct) != JS_STR || (i >= 0 && !js_is_bool(d, i))) {
        js_free(d);
        return srv_error_(s, cs, c, 400, "content must be a string (and with_pieces true or false)", "invalid_request_error", "content", NULL);
    }
    wp = js_typeof(d, i) == JS_TRUE;
    tok_ids ids = {0};
    int r = tok_encode(s->t, js_str(d, ct), js_str_len(d, ct), &ids);
    js_free(d);
    if (r) return tok_ids_free(&ids), srv_error_(s, cs, c, 400, "the text could not be tokenized (out of memory, or too long)", "invalid_request_error", "content", NULL);
    jw w = {0};
    jw_lit(&w, "{\"tokens\":[");
    for (size_t k = 0; k < ids.n; k++) {
        if (k) jw_lit(&w, ",");
        if (!wp) { jw_int(&w, ids.ids[k]); continue; }
        size_t pn = 0;
        const char *p = tok_piece(s->t, ids.ids[k], &pn);
        jw_lit(&w, "{\"id\":"), jw_int(&w, ids.ids[k]), jw_lit(&w, ",\"piece\":");
        if (!p || js_utf8_prefix((const unsigned char *)p, pn) == pn) jw_strn(&w, p ? p : "", pn);
        else {
            jw_lit(&w, "[");
            for (size_t b = 0; b < pn; b++) jw_lit(&w, b ? "," : ""), jw_int(&w, (unsigned char)p[b]);
            jw_lit(&w, "]");
        }
        jw_lit(&w, "}");
    }
    jw_lit(&w, "]}");
    tok_ids_free(&ids);
    return srv_json_(s, cs, c, 200, &w);
}

/* POST /detokenize {"tokens": ids}: {"content": text}. */
static inline enum MHD_Result srv_detokenize_(srv *s, srv_conn_ *cs, struct MHD_Connection *c, const char *body, size_t len) {
    char jerr[160];
    js_doc *d = js_parse(body, len, jerr, sizeof jerr);
    int o = d ? d->root : -1, ts = js_get(d, o, "tokens");
    if (!d || js_typeof(d, o) != JS_OBJ || js_typeof(d, ts) != JS_ARR || js_count(d, o) != 1) {
        js_free(d);
        return srv_error_(s, cs, c, 400, d ? "the body must be {\"tokens\": [ids]}" : jerr, "invalid_request_error", d ? "tokens" : NULL, NULL);
    }
    int n = js_count(d, ts), *ids = (int *)malloc((size_t)n * sizeof(int) + sizeof(int)), k = 0;
    if (!ids) return js_free(d), srv_error_(s, cs, c, 500, "out of memory", "server_error", NULL, NULL);
    for (int x = js_first(d, ts); x >= 0; x = js_next(d, x), k++) {
        int64_t v = js_int(d, x);
        if (!js_is_int(d, x) || v < 0 || v >= tok_n_ids(s->t)) {
            char msg[160];
            snprintf(msg, sizeof msg, "tokens[%d] is not a token id of this model (0 to %d)", k, tok_n_ids(s->t) - 1);
            free(ids), js_free(d);
            return srv_error_(s, cs, c, 400, msg, "invalid_request_error", "tokens", NULL);
        }
        ids[k] = (int)v;
    }
    js_free(d);
    tok_str out = {0};
    int r = tok_decode(s->t, ids, (size_t)n, &out);
    free(ids);
    if (r) return tok_str_free(&out), srv_error_(s, cs, c, 500, "out of memory", "server_error", NULL, NULL);
    jw w = {0};
    jw_lit(&w, "{\"content\":");
    jw_strn(&w, out.s ? out.s : "", out.n);
    jw_lit(&w, "}");
    tok_str_free(&out);
    return srv_json_(s, cs, c, 200, &w);
}

static inline void srv_metric_(jw *w, const char *name, const char *type, const char *help) {
    jw_lit(w, "# HELP "), jw_lit(w, name), jw_lit(w, " "), jw_lit(w, help), jw_lit(w, "\n# TYPE "), jw_lit(w, name), jw_lit(w, " ");
    jw_lit(w, type), jw_lit(w, "\n");
}

static inline void srv_sample_(jw *w, const char *name, const char *labels, double v) {
    char b[64];
    jw_lit(w, name);
    if (labels) jw_lit(w, "{"), jw_lit(w, labels), jw_lit(w, "}");
    snprintf(b, sizeof b, " %.17g\n", v);
    jw_lit(w, b);
}

static inline void srv_histogram_(jw *w, const char *name, const char *help, const double *le, int n, const uint64_t *counts, double sum, uint64_t count) {
    char lab[64], nm[128];
    srv_metric_(w, name, "histogram", help);
    snprintf(nm, sizeof nm, "%s_bucket", name);
    uint64_t cum = 0;
    for (int b = 0; b <= n; b++) {
        cum += counts[b];
        if (b < n) snprintf(lab, sizeof lab, "le=\"%g\"", le[b]);
        else snprintf(lab, sizeof lab, "le=\"+Inf\"");
        srv_sample_(w, nm, lab, (double)cum);
    }
    snprintf(nm, sizeof nm, "%s_sum", name), srv_sample_(w, nm, NULL, sum);
    snprintf(nm, sizeof nm, "%s_count", name), srv_sample_(w, nm, NULL, (double)count);
}

/* GET /metrics: Prometheus' text format. */
static inline enum MHD_Result srv_metrics_(srv *s, srv_conn_ *cs, struct MHD_Connection *c) {
    jw w = {0};
    char lab[160];
    srv_metric_(&w, "colibri_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (int e = 0; e < SRV_EP_N; e++)
        for (int k = 0; k < SRV_NSTATUS; k++) {
            long long v = atomic_load(&s->counts[e][k]);
            if (!v) continue;
            if (k < SRV_NSTATUS - 1) snprintf(lab, sizeof lab, "endpoint=\"%s\",status=\"%d\"", srv_ep_names_[e], srv_statuses_[k]);
            else snprintf(lab, sizeof lab, "endpoint=\"%s\",status=\"other\"", srv_ep_names_[e]);
            srv_sample_(&w, "colibri_requests_total", lab, (double)v);
        }
    pthread_mutex_lock(&s->mu);
    srv_totals t = s->tot;
    int queued = s->queued;
    pthread_mutex_unlock(&s->mu);
    srv_metric_(&w, "colibri_prompt_tokens_total", "counter", "Prompt tokens of answered generation requests.");
    srv_sample_(&w, "colibri_prompt_tokens_total", NULL, (double)t.prompt_tokens);
    srv_metric_(&w, "colibri_prompt_tokens_cached_total", "counter", "Prompt tokens whose KV state was reused (not prefilled).");
    srv_sample_(&w, "colibri_prompt_tokens_cached_total", NULL, (double)t.cached_tokens);
    srv_metric_(&w, "colibri_generated_tokens_total", "counter", "Tokens generated.");
    srv_sample_(&w, "colibri_generated_tokens_total", NULL, (double)t.generated_tokens);
    srv_metric_(&w, "colibri_generation_requests_total", "counter", "Generation requests the compute thread finished (answered or failed).");
    srv_sample_(&w, "colibri_generation_requests_total", NULL, (double)t.requests);
    srv_metric_(&w, "colibri_queue_length", "gauge", "Generation requests waiting for the compute thread.");
    srv_sample_(&w, "colibri_queue_length", NULL, queued);
    srv_metric_(&w, "colibri_requests_running", "gauge", "Generation requests being computed.");
    srv_sample_(&w, "colibri_requests_running", NULL, t.running);
    srv_histogram_(&w, "colibri_time_to_first_token_seconds", "Time from a request's start of compute to its first token.", srv_ttft_le_, SRV_TTFT_N,
                   t.ttft, t.ttft_sum, t.ttft_count);
    srv_histogram_(&w, "colibri_time_per_output_token_seconds", "Time between generated tokens (each gap counted at its request's mean).",
                   srv_tpot_le_, SRV_TPOT_N, t.tpot, t.tpot_sum, t.tpot_count);
    srv_metric_(&w, "colibri_decode_forwards_total", "counter", "Forward passes of the main model that decoded (after the prompt).");
    srv_sample_(&w, "colibri_decode_forwards_total", NULL, (double)t.forwards);
    srv_metric_(&w, "colibri_decode_sequences_total", "counter", "Sum over decoding forwards of the sequences each advanced.");
    srv_sample_(&w, "colibri_decode_sequences_total", NULL, (double)t.sequences);
    srv_metric_(&w, "colibri_expert_lookups_total", "counter", "Routed experts looked up per layer batch, by where they were found.");
    srv_sample_(&w, "colibri_expert_lookups_total", "source=\"gpu\"", (double)t.hit_gpu);
    srv_sample_(&w, "colibri_expert_lookups_total", "source=\"pinned\"", (double)t.hit_pin);
    srv_sample_(&w, "colibri_expert_lookups_total", "source=\"lru\"", (double)t.hit_lru);
    srv_sample_(&w, "colibri_expert_lookups_total", "source=\"disk\"", (double)t.miss);
    uint64_t hits = t.hit_gpu + t.hit_pin + t.hit_lru;
    srv_metric_(&w, "colibri_expert_hit_ratio", "gauge", "Share of routed expert lookups found in memory, since the start.");
    srv_sample_(&w, "colibri_expert_hit_ratio", NULL, hits + t.miss ? (double)hits / (double)(hits + t.miss) : 0.0);
    srv_metric_(&w, "colibri_disk_read_bytes_total", "counter", "Expert bytes read from disk while answering requests.");
    srv_sample_(&w, "colibri_disk_read_bytes_total", NULL, (double)t.disk_bytes);
    srv_metric_(&w, "colibri_uptime_seconds", "gauge", "Seconds since the server started listening.");
    srv_sample_(&w, "colibri_uptime_seconds", NULL, srv_now_() - s->started);
    enum MHD_Result rc = w.oom ? MHD_NO : srv_reply_(s, cs, c, 200, "text/plain; version=0.0.4; charset=utf-8", w.s, w.n);
    jw_free(&w);
    return rc;
}

/* GET / and /index.html: the chat page (webui/index.html, compiled in as
 * webui.h). Its policy lets it reach this server only. */
static inline enum MHD_Result srv_page_(srv *s, srv_conn_ *cs, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(COLI_WEBUI_LEN, (void *)coli_webui_html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                                          "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    return srv_queue_(s, cs, c, 200, r);
}

/* OPTIONS: a browser's preflight, answered 204 with what is allowed when
 * the origin is (no CORS headers otherwise: the browser then refuses). */
static inline enum MHD_Result srv_preflight_(srv *s, srv_conn_ *cs, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    if (cs->origin) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", h && strlen(h) < 2048 ? h : "Authorization, Content-Type, x-api-key");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return srv_queue_(s, cs, c, 204, r);
}

/* ------------------------------------------------------------ routing */

/* The route of a path: the /v1 prefix optional for the OpenAI endpoints
 * (clients configured with a base URL without it), trailing slashes
 * ignored; *id is the {id} of /v1/models/{id}. */
static inline int srv_route_(const char *url, const char **id) {
    char p[256];
    size_t n = strlen(url);
    *id = NULL;
    if (n >= sizeof p) return SRV_EP_OTHER;
    memcpy(p, url, n + 1);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    const char *q = !strncmp(p, "/v1/", 4) ? p + 3 : p;
    if (!strcmp(q, "/chat/completions")) return SRV_EP_CHAT;
    if (!strcmp(q, "/completions")) return SRV_EP_COMPLETIONS;
    if (!strcmp(q, "/messages")) return SRV_EP_MESSAGES;
    if (!strcmp(q, "/messages/count_tokens")) return SRV_EP_COUNT_TOKENS;
    if (!strcmp(q, "/responses")) return SRV_EP_RESPONSES;
    if (!strcmp(q, "/models")) return SRV_EP_MODELS;
    if (!strncmp(q, "/models/", 8) && q[8]) return *id = url + (q - p) + 8, SRV_EP_MODELS; /* url and p share this prefix */
    if (!strcmp(p, "/") || !strcmp(p, "/index.html")) return SRV_EP_PAGE;
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health")) return SRV_EP_HEALTH;
    if (!strcmp(p, "/props")) return SRV_EP_PROPS;
    if (!strcmp(p, "/metrics")) return SRV_EP_METRICS;
    if (!strcmp(p, "/tokenize")) return SRV_EP_TOKENIZE;
    if (!strcmp(p, "/detokenize")) return SRV_EP_DETOKENIZE;
    return SRV_EP_OTHER;
}

/* The size of the header block: each field's name and value with their
 * separators, as they arrived. */
static inline enum MHD_Result srv_count_header_(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

static inline enum MHD_Result srv_handle_(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                          const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = (srv *)cls;
    if (!*con_cls) { /* the first-line notice could not allocate */
        srv_conn_ *cs = (srv_conn_ *)calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        atomic_fetch_add(&s->active, 1);
    }
    srv_conn_ *cs = (srv_conn_ *)*con_cls;
    const char *id;
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!cs->headed) { /* the headers arrived */
        cs->headed = 1;
        cs->ep = srv_route_(url, &id);
        const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        cs->origin = srv_origin_ok_(s->o.cors, origin) ? origin : NULL;
        size_t hb = strlen(url) + strlen(method) + 12;
        MHD_get_connection_values(c, MHD_HEADER_KIND, srv_count_header_, &hb);
        if (srv_sock_over_(s, c)) return srv_too_many_(s, cs, c);
        if (hb > SRV_MAX_HEADERS) return srv_error_(s, cs, c, 431, "the request's header block is larger than 64 KB", "invalid_request_error", NULL, NULL);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (post && cl && strtoull(cl, NULL, 10) > s->o.max_body) cs->too_big = 1;
        if (cs->too_big) return srv_error_(s, cs, c, 413, "the request body is larger than the server accepts (SERVE_MAX_BODY)", "invalid_request_error", NULL, NULL);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_big && cs->body.n + *upload_size <= s->o.max_body) jw_raw(&cs->body, upload, *upload_size);
        else cs->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    srv_sock_busy_(s, c, 1); /* the whole request arrived */
    if (cs->too_big) return srv_error_(s, cs, c, 413, "the request body is larger than the server accepts (SERVE_MAX_BODY)", "invalid_request_error", NULL, NULL);
    if (cs->body.oom) return srv_error_(s, cs, c, 500, "out of memory", "server_error", NULL, NULL);
    if (!strcmp(method, "OPTIONS")) return cs->ep = SRV_EP_PREFLIGHT, srv_preflight_(s, cs, c);
    int ep = srv_route_(url, &id);
    if (ep == SRV_EP_HEALTH) { /* open without a key: load balancers probe it */
        if (!get) return srv_error_(s, cs, c, 405, "use GET", "invalid_request_error", NULL, NULL);
        return atomic_load(&s->stopping) ? srv_error_(s, cs, c, 503, "shutting down", "server_error", NULL, NULL)
                                         : srv_reply_(s, cs, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
    }
    if (ep == SRV_EP_PAGE) /* open without a key: the page asks for one */
        return get ? srv_page_(s, cs, c) : srv_error_(s, cs, c, 405, "use GET", "invalid_request_error", NULL, NULL);
    if (ep == SRV_EP_OTHER) {
        char msg[400];
        snprintf(msg, sizeof msg, "no such endpoint: %.200s (POST /v1/chat/completions, /v1/completions, /v1/messages, /v1/messages/count_tokens, "
                 "/v1/responses, /tokenize, /detokenize; GET /v1/models, /health, /props, /metrics, / (the chat page))", url);
        return srv_error_(s, cs, c, 404, msg, "invalid_request_error", NULL, "not_found");
    }
    if (!srv_authorized_(s, c))
        return srv_error_(s, cs, c, 401, "a valid API key is required: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'", "authentication_error",
                          NULL, "invalid_api_key");
    int wants_post = ep == SRV_EP_CHAT || ep == SRV_EP_COMPLETIONS || ep == SRV_EP_MESSAGES || ep == SRV_EP_COUNT_TOKENS || ep == SRV_EP_RESPONSES ||
                     ep == SRV_EP_TOKENIZE || ep == SRV_EP_DETOKENIZE;
    if (wants_post ? !post : !get) return srv_error_(s, cs, c, 405, wants_post ? "use POST" : "use GET", "invalid_request_error", NULL, NULL);
    const char *b = cs->body.s ? cs->body.s : "";
    switch (ep) {
    case SRV_EP_CHAT: return srv_generate_(s, cs, c, SRV_CHAT, b, cs->body.n);
    case SRV_EP_COMPLETIONS: return srv_generate_(s, cs, c, SRV_COMPLETIONS, b, cs->body.n);
    case SRV_EP_MESSAGES: return srv_generate_(s, cs, c, SRV_MESSAGES, b, cs->body.n);
    case SRV_EP_COUNT_TOKENS: return srv_count_tokens_(s, cs, c, b, cs->body.n);
    case SRV_EP_RESPONSES: return srv_generate_(s, cs, c, SRV_RESPONSES, b, cs->body.n);
    case SRV_EP_MODELS: return srv_models_(s, cs, c, id);
    case SRV_EP_TOKENIZE: return srv_tokenize_(s, cs, c, b, cs->body.n);
    case SRV_EP_DETOKENIZE: return srv_detokenize_(s, cs, c, b, cs->body.n);
    case SRV_EP_METRICS: return srv_metrics_(s, cs, c);
    default: return srv_reply_(s, cs, c, 200, "application/json", s->o.props ? s->o.props : "{}", s->o.props ? strlen(s->o.props) : 2);
    }
}

static inline void srv_done_(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    srv *s = (srv *)cls;
    srv_conn_ *cs = (srv_conn_ *)*con_cls;
    if (cs) jw_free(&cs->body), free(cs), atomic_fetch_sub(&s->active, 1);
    *con_cls = NULL;
    srv_sock_busy_(s, c, 0);
}

/* Starts listening. 0, or -1 with err saying why. */
static inline int srv_start(srv *s, const srv_opts *o, const tok *t, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->o = *o, s->t = t;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    s->rs_ok = resp_store_init(&s->rs, SRV_RESP_ITEMS, SRV_RESP_BYTES) == 0; /* without it, previous_response_id finds nothing */
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(o->host, port, &hints, &ai);
    if (g || !ai) {
        if (s->rs_ok) resp_store_free(&s->rs), s->rs_ok = 0;
        return snprintf(err, errlen, "COLI_HOST=%s: %s", o->host, g ? gai_strerror(g) : "no address"), -1;
    }
    /* MHD_USE_ITC: srv_stop quiesces the daemon before stopping it */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, srv_handle_, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conns,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SRV_MHD_POOL, MHD_OPTION_NOTIFY_COMPLETED, srv_done_, s, MHD_OPTION_NOTIFY_CONNECTION,
        srv_notify_conn_, s, MHD_OPTION_URI_LOG_CALLBACK, srv_uri_, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        if (s->rs_ok) resp_store_free(&s->rs), s->rs_ok = 0;
        return snprintf(err, errlen, "cannot listen on %s:%d (in use, or not an address of this machine)", o->host, o->port), -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->daemon = d, s->port = di ? di->port : o->port;
    s->started = srv_now_();
    s->watching = pthread_create(&s->watcher, NULL, srv_watch_, s) == 0;
    return 0;
}

/* Stops: queued requests are answered 503, no new connection is accepted,
 * requests already received get their answers sent (the one the compute
 * thread cut short, 503s, health checks) for up to SRV_DRAIN_MS, then
 * connections are closed and threads joined. The compute thread has
 * returned its current request first. */
static inline void srv_stop(srv *s) {
    atomic_store(&s->stopping, 1);
    pthread_mutex_lock(&s->mu);
    srv_job *j = s->head;
    s->head = s->tail = NULL, s->queued = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    while (j) {
        srv_job *next = j->next;
        srv_fail(j, s->o.model, 503, "the server is shutting down", "server_error", NULL);
        srv_release(s, j);
        j = next;
    }
    if (s->watching) pthread_join(s->watcher, NULL);
    if (s->daemon) {
        struct MHD_Daemon *d = (struct MHD_Daemon *)s->daemon;
        MHD_socket lfd = MHD_quiesce_daemon(d);
        /* a request whose bytes were already in the socket is read within
         * SRV_SETTLE_MS and then counted in active */
        for (int ms = 0; ms < SRV_DRAIN_MS && (ms < SRV_SETTLE_MS || atomic_load(&s->active) > 0); ms += 10) {
            struct timespec t = {0, 10000000L};
            nanosleep(&t, NULL);
        }
        MHD_stop_daemon(d);
        if (lfd != MHD_INVALID_SOCKET) close(lfd);
    }
    s->daemon = NULL;
    if (s->rs_ok) resp_store_free(&s->rs), s->rs_ok = 0;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->cmu);
}

#else /* without libmicrohttpd */
#include "compat.h"

static inline int srv_start(srv *s, const srv_opts *o, const tok *t, char *err, size_t errlen) {
    (void)s, (void)o, (void)t;
    snprintf(err, errlen, "this colibri was built without libmicrohttpd (" COMPAT_MHD_HINT ") and cannot serve HTTP");
    return -1;
}
static inline void srv_stop(srv *s) { (void)s; }

#endif
#endif
