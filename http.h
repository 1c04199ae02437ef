/* http.h — serve mode's HTTP side: libmicrohttpd (a thread per
 * connection) accepts the OpenAI-compatible requests, checks and
 * tokenizes them (openai.h), and hands them to the one compute thread
 * through a bounded queue; the compute thread hands back response text
 * (srv_emit, srv_finish) that the connection's thread sends. GET / is
 * the chat page (webui.h, generated from webui/index.html).
 *
 * Bounds on what a client controls: the body (max_body, 413), the header
 * block (libmicrohttpd's per-connection memory, 431), connections at once
 * (max_conns; beyond it the connection is refused), an idle connection
 * (timeout_s: a slowloris is dropped), the queue (max_queue waiting
 * requests, 429), messages per request and max_tokens against the context
 * (400). A client that goes away cancels its request (srv_job.cancel,
 * checked by the compute thread at every token).
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

#include "openai.h"
#include "tok.h"

typedef struct srv_job srv_job;
struct srv_job {
    oai_req req;
    tok_ids ids;     /* the prompt's ids */
    char id[48];     /* "chatcmpl-..." / "cmpl-..." */
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
    int max_conns, max_queue, timeout_s, max_messages;
    size_t max_body;
    int ctx;           /* the model's context */
    const char *model; /* the name /v1/models lists */
    const char *fingerprint;
    int chat_fmt;      /* the model's chat format (chat.h CHAT_*): how requests render */
} srv_opts;

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
    uint64_t seq;
} srv;

static inline void srv_job_free_(srv_job *j) {
    oai_req_free(&j->req);
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
    }
    pthread_mutex_unlock(&s->mu);
    return j;
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

/* Per-connection state while a body arrives. */
typedef struct {
    jw body;
    int too_big;
} srv_conn_;

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

static inline enum MHD_Result srv_reply_(struct MHD_Connection *c, unsigned status, const char *type, const char *body, size_t n) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static inline enum MHD_Result srv_error_(struct MHD_Connection *c, unsigned status, const char *msg, const char *type) {
    jw w = {0};
    oai_error_json(&w, msg, type, NULL);
    enum MHD_Result rc = w.oom ? MHD_NO : srv_reply_(c, status, "application/json", w.s, w.n);
    jw_free(&w);
    return rc;
}

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

static inline enum MHD_Result srv_completion_(srv *s, struct MHD_Connection *c, int chat, const char *body, size_t len) {
    char err[512];
    oai_limits lim = {s->o.max_messages, s->o.ctx, s->o.chat_fmt};
    srv_job *j = (srv_job *)calloc(1, sizeof *j);
    if (!j) return srv_error_(c, 500, "out of memory", "server_error");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    if (oai_parse(body, len, chat, &lim, &j->req, err, sizeof err)) {
        srv_job_free_(j);
        return srv_error_(c, 400, err, "invalid_request_error");
    }
    int r = tok_encode(s->t, j->req.text, j->req.text_len, &j->ids);
    if (!r && !j->ids.n) { srv_job_free_(j); return srv_error_(c, 400, "the prompt is empty", "invalid_request_error"); }
    if (r || (int)j->ids.n >= s->o.ctx || (j->req.max_tokens && (int)j->ids.n + j->req.max_tokens > s->o.ctx)) {
        if (r) snprintf(err, sizeof err, "the prompt could not be tokenized (out of memory, or longer than the tokenizer accepts)");
        else
            snprintf(err, sizeof err, "the prompt has %zu tokens%s%.0d, the context is %d (CTX)", j->ids.n, j->req.max_tokens ? " and max_tokens is " : "",
                     j->req.max_tokens, s->o.ctx);
        srv_job_free_(j);
        return srv_error_(c, 400, err, "invalid_request_error");
    }
    for (size_t i = 0; i < j->ids.n; i++)
        if (j->ids.ids[i] < 0) { srv_job_free_(j); return srv_error_(c, 400, "the prompt has a token outside the vocabulary", "invalid_request_error"); }
    pthread_mutex_lock(&s->mu);
    uint64_t seq = ++s->seq;
    pthread_mutex_unlock(&s->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    j->created = (long long)ts.tv_sec;
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)ts.tv_sec, (unsigned long long)(seq & 0xffff));
    int q = srv_enqueue_(s, j);
    if (q) {
        srv_job_free_(j);
        if (q == 429) atomic_fetch_add(&s->refused_busy, 1);
        return srv_error_(c, (unsigned)q, q == 429 ? "the server is busy: the request queue is full; retry later" : "the server is shutting down",
                          q == 429 ? "rate_limit_error" : "server_error");
    }
    atomic_fetch_add(&s->served, 1);
    int fd = srv_conn_fd_(c);
    if (j->req.stream) {
        srv_stream_ *st = (srv_stream_ *)malloc(sizeof *st);
        struct MHD_Response *resp = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, srv_stream_cb_, st, srv_stream_free_) : NULL;
        if (!resp) {
            free(st);
            atomic_store(&j->cancel, 1);
            srv_release(s, j);
            return MHD_NO;
        }
        st->s = s, st->j = j, st->fd = fd;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return rc;
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
    enum MHD_Result rc = atomic_load(&j->cancel) && !j->out.n ? MHD_NO
                         : srv_reply_(c, (unsigned)j->status, "application/json", j->out.s ? j->out.s : "", j->out.n);
    srv_release(s, j);
    return rc;
}

static inline enum MHD_Result srv_models_(srv *s, struct MHD_Connection *c) {
    jw w = {0};
    jw_lit(&w, "{\"object\":\"list\",\"data\":[{\"id\":");
    jw_str(&w, s->o.model);
    jw_lit(&w, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"colibri\",\"meta\":{\"n_ctx\":");
    jw_int(&w, s->o.ctx);
    jw_lit(&w, "}}]}");
    enum MHD_Result rc = w.oom ? MHD_NO : srv_reply_(c, 200, "application/json", w.s, w.n);
    jw_free(&w);
    return rc;
}

/* GET / and /index.html: the chat page (webui/index.html, compiled in as
 * webui.h). Its policy lets it reach this server only. */
static inline enum MHD_Result srv_page_(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(COLI_WEBUI_LEN, (void *)coli_webui_html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                                          "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

static inline enum MHD_Result srv_handle_(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                          const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = (srv *)cls;
    int post = !strcmp(method, "POST");
    int chat = !strcmp(url, "/v1/chat/completions"), comp = !strcmp(url, "/v1/completions");
    if (!*con_cls) {
        srv_conn_ *cs = (srv_conn_ *)calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        atomic_fetch_add(&s->active, 1);
        if (post && (chat || comp)) {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
            if (cl && strtoull(cl, NULL, 10) > s->o.max_body) cs->too_big = 1;
            if (cs->too_big) return srv_error_(c, 413, "the request body is larger than the server accepts (SERVE_MAX_BODY)", "invalid_request_error");
        }
        return MHD_YES;
    }
    srv_conn_ *cs = (srv_conn_ *)*con_cls;
    if (*upload_size) {
        if (!cs->too_big && cs->body.n + *upload_size <= s->o.max_body) jw_raw(&cs->body, upload, *upload_size);
        else cs->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->too_big) return srv_error_(c, 413, "the request body is larger than the server accepts (SERVE_MAX_BODY)", "invalid_request_error");
    if (cs->body.oom) return srv_error_(c, 500, "out of memory", "server_error");
    if (!strcmp(url, "/health")) {
        if (strcmp(method, "GET")) return srv_error_(c, 405, "use GET", "invalid_request_error");
        return atomic_load(&s->stopping) ? srv_error_(c, 503, "shutting down", "server_error") : srv_reply_(c, 200, "application/json", "{\"status\":\"ok\"}", 15);
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return strcmp(method, "GET") ? srv_error_(c, 405, "use GET", "invalid_request_error") : srv_page_(c);
    if (!strcmp(url, "/v1/models")) return strcmp(method, "GET") ? srv_error_(c, 405, "use GET", "invalid_request_error") : srv_models_(s, c);
    if (chat || comp) {
        if (!post) return srv_error_(c, 405, "use POST", "invalid_request_error");
        return srv_completion_(s, c, chat, cs->body.s ? cs->body.s : "", cs->body.n);
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no such endpoint: %.200s (POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health)", url);
    return srv_error_(c, 404, msg, "invalid_request_error");
}

static inline void srv_done_(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    srv_conn_ *cs = (srv_conn_ *)*con_cls;
    if (cs) jw_free(&cs->body), free(cs), atomic_fetch_sub(&((srv *)cls)->active, 1);
    *con_cls = NULL;
}

/* Starts listening. 0, or -1 with err saying why. */
static inline int srv_start(srv *s, const srv_opts *o, const tok *t, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->o = *o, s->t = t;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(o->host, port, &hints, &ai);
    if (g || !ai) return snprintf(err, errlen, "HOST=%s: %s", o->host, g ? gai_strerror(g) : "no address"), -1;
    /* MHD_USE_ITC: srv_stop quiesces the daemon before stopping it */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, srv_handle_, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conns, MHD_OPTION_CONNECTION_TIMEOUT,
                                            (unsigned)o->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                                            MHD_OPTION_NOTIFY_COMPLETED, srv_done_, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) return snprintf(err, errlen, "cannot listen on %s:%d (in use, or not an address of this machine)", o->host, o->port), -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->daemon = d, s->port = di ? di->port : o->port;
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
        jw w = {0};
        if (j->req.stream) jw_lit(&w, "data: "), oai_error_json(&w, "the server is shutting down", "server_error", NULL), jw_lit(&w, "\n\n");
        else oai_error_json(&w, "the server is shutting down", "server_error", NULL);
        srv_finish(j, 503, &w);
        jw_free(&w);
        srv_release(s, j);
        j = next;
    }
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
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
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
