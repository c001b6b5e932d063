/*
 * The C side of tools/bench: the same phases, calling librdmacm.
 *
 *   bench_librdmacm phases DST N RUNS   one JSON line per run: seconds per phase
 *   bench_librdmacm memory DST N        RSS before and with N resolved ids, peak RSS
 *   bench_librdmacm resolve DST         resolve DST once and print the source address
 *   bench_librdmacm listen PORT         accept every connection request, answer disconnects
 *   bench_librdmacm connect DST PORT N serial|pipelined QPN
 *                                       N connections to a listener: one JSON line
 *
 * Phases, all on one event channel: create N ids; resolve_addr for all, then
 * collect N events; resolve_route likewise; destroy all. Built by tools/bench
 * with `gcc -O2 ... -lrdmacm` (package librdmacm-dev).
 *
 * Connections have no QP on either side (docs/benchmarks.md, "Connection phase"):
 * the QP numbers put in the REQ and the REP are made up, each one used once (the
 * peer's CM answers a REQ or REP whose QP number it still holds, live or in
 * timewait, with REJECTED 10).  `listen` accepts each request with such a number
 * (rdma_accept of an id without a QP needs conn_param.qp_num), and after the
 * client's DREQ (DISCONNECTED) sends the DREP and destroys the id; it runs until
 * killed and then prints its counts.  `connect` is the client: per connection
 * rdma_create_id, resolve_addr, resolve_route, rdma_connect (QP number QPN + i),
 * CONNECT_RESPONSE -> rdma_establish (the RTU) and rdma_disconnect, DISCONNECTED
 * -> rdma_destroy_id.  `serial` runs one connection at a time and times each step;
 * `pipelined` starts all N (create + resolve_addr each) and advances each
 * connection as its events come, on the one channel.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 2000

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_bytes(void)
{
	long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &size, &resident) != 2)
			resident = 0;
		fclose(f);
	}
	return resident * sysconf(_SC_PAGESIZE);
}

static long peak_rss_bytes(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss * 1024L;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

/* Collect n events; count those that are not `want` (and those with a status). */
static long collect(struct rdma_event_channel *ch, long n, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	long bad = 0;

	for (long i = 0; i < n; i++) {
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event");
		if (ev->event != want || ev->status)
			bad++;
		rdma_ack_cm_event(ev);
	}
	return bad;
}

static void parse_dst(const char *text, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, text, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
	} else if (inet_pton(AF_INET6, text, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
	} else {
		fprintf(stderr, "not an IP address: %s\n", text);
		exit(2);
	}
}

/* Create, resolve and route n ids; returns the failures; times in t[0..2]. */
static long setup(struct rdma_event_channel *ch, struct rdma_cm_id **ids, long n,
		  struct sockaddr *dst, double *t)
{
	long bad;
	double t0 = now();

	for (long i = 0; i < n; i++)
		if (rdma_create_id(ch, &ids[i], NULL, RDMA_PS_TCP))
			die("rdma_create_id");
	double t1 = now();
	for (long i = 0; i < n; i++)
		if (rdma_resolve_addr(ids[i], NULL, dst, TIMEOUT_MS))
			die("rdma_resolve_addr");
	bad = collect(ch, n, RDMA_CM_EVENT_ADDR_RESOLVED);
	double t2 = now();
	for (long i = 0; i < n; i++)
		if (rdma_resolve_route(ids[i], TIMEOUT_MS))
			die("rdma_resolve_route");
	bad += collect(ch, n, RDMA_CM_EVENT_ROUTE_RESOLVED);
	double t3 = now();
	if (t) {
		t[0] = t1 - t0;
		t[1] = t2 - t1;
		t[2] = t3 - t2;
	}
	return bad;
}

/* -- connections ---------------------------------------------------------------------- */

#define QPN_LO 0x100000u
#define QPN_HI 0xfffffeu

/* The next made-up QP number after qpn: never 0, 1 or 0xffffff, below 24 bits. */
static unsigned next_qpn(unsigned qpn)
{
	return qpn >= QPN_HI || qpn < QPN_LO ? QPN_LO : qpn + 1;
}

static void conn_param(struct rdma_conn_param *p, unsigned qpn)
{
	memset(p, 0, sizeof(*p));
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qpn;
}

static volatile sig_atomic_t stop;
static long counts[6]; /* requests, accepted, established, disconnected, other events, refused */

static void on_signal(int sig)
{
	char line[200];
	int len = snprintf(line, sizeof(line),
			   "{\"requests\": %ld, \"accepted\": %ld, \"established\": %ld, \"disconnected\": %ld, "
			   "\"other_events\": %ld, \"refused\": %ld}\n",
			   counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);

	(void)sig;
	if (write(1, line, len) < 0)
		_exit(3);
	_exit(0);
}

static int listen_mode(int port)
{
	struct sockaddr_in any;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lst;
	struct rdma_conn_param param;
	struct rdma_cm_event *ev;
	unsigned qpn;

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	srandom(getpid() ^ (unsigned)(now() * 1e6));
	qpn = QPN_LO + random() % (QPN_HI - QPN_LO);
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (rdma_create_id(ch, &lst, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	memset(&any, 0, sizeof(any));
	any.sin_family = AF_INET;
	any.sin_port = htons(port);
	if (rdma_bind_addr(lst, (struct sockaddr *)&any))
		die("rdma_bind_addr");
	if (rdma_listen(lst, 1024))
		die("rdma_listen");
	printf("listening on port %d\n", port);
	fflush(stdout);
	while (!stop) {
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event");
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type type = ev->event;

		rdma_ack_cm_event(ev); /* first: rdma_destroy_id waits for the id's events to be acked */
		if (id == lst) {
			counts[4]++;
			continue;
		}
		switch (type) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			counts[0]++;
			qpn = next_qpn(qpn);
			conn_param(&param, qpn);
			if (rdma_accept(id, &param)) { /* the kernel rejected the request itself */
				counts[5]++;
				rdma_destroy_id(id);
			} else {
				counts[1]++;
			}
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			counts[2]++;
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			counts[3]++;
			rdma_disconnect(id); /* the DREP */
			rdma_destroy_id(id);
			break;
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
			counts[4]++;
			break;
		default: /* REJECTED, UNREACHABLE, CONNECT_ERROR ...: the connection is gone */
			counts[4]++;
			rdma_destroy_id(id);
			break;
		}
	}
	return 0;
}

/* The steps of a connection, timed in serial mode (seconds, summed over connections). */
enum { T_SETUP, T_CONNECT, T_ESTABLISH, T_DISCONNECT, T_DESTROY, T_STEPS };
static const char *step_names[T_STEPS] = {"setup", "connect", "establish", "disconnect", "destroy"};

struct outcome {
	long established, completed, failures;
	char first_failure[120];
};

static void failed(struct outcome *o, const char *what, struct rdma_cm_event *ev)
{
	if (!o->failures++) {
		if (ev)
			snprintf(o->first_failure, sizeof(o->first_failure), "%s: %s status %d", what,
				 rdma_event_str(ev->event), ev->status);
		else
			snprintf(o->first_failure, sizeof(o->first_failure), "%s: %s", what, strerror(errno));
	}
}

/* The next event of the channel, which must be `want` for `id`: 0, or -1 (counted failed). */
static int expect(struct rdma_event_channel *ch, struct rdma_cm_id *id, enum rdma_cm_event_type want,
		  const char *what, struct outcome *o)
{
	struct rdma_cm_event *ev;
	int ok;

	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	ok = ev->id == id && ev->event == want && !ev->status;
	if (!ok)
		failed(o, what, ev);
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

static void serial(struct rdma_event_channel *ch, struct sockaddr *dst, long n, unsigned qpn,
		   struct outcome *o, double *t)
{
	struct rdma_conn_param param;
	struct rdma_cm_id *id;

	for (long i = 0; i < n; i++, qpn = next_qpn(qpn)) {
		double t0 = now(), t1, t2, t3, t4;

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, dst, TIMEOUT_MS))
			die("rdma_resolve_addr");
		if (expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, "resolve_addr", o))
			goto out;
		if (rdma_resolve_route(id, TIMEOUT_MS))
			die("rdma_resolve_route");
		if (expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve_route", o))
			goto out;
		t1 = now();
		conn_param(&param, qpn);
		if (rdma_connect(id, &param)) {
			failed(o, "rdma_connect", NULL);
			goto out;
		}
		if (expect(ch, id, RDMA_CM_EVENT_CONNECT_RESPONSE, "connect", o))
			goto out;
		t2 = now();
		if (rdma_establish(id)) {
			failed(o, "rdma_establish", NULL);
			goto out;
		}
		o->established++;
		t3 = now();
		if (rdma_disconnect(id)) {
			failed(o, "rdma_disconnect", NULL);
			goto out;
		}
		if (expect(ch, id, RDMA_CM_EVENT_DISCONNECTED, "disconnect", o))
			goto out;
		o->completed++;
		t4 = now();
		t[T_SETUP] += t1 - t0;
		t[T_CONNECT] += t2 - t1;
		t[T_ESTABLISH] += t3 - t2;
		t[T_DISCONNECT] += t4 - t3;
		rdma_destroy_id(id);
		t[T_DESTROY] += now() - t4;
		continue;
out:
		rdma_destroy_id(id);
	}
}

static void pipelined(struct rdma_event_channel *ch, struct sockaddr *dst, long n, unsigned qpn,
		      struct outcome *o)
{
	struct rdma_conn_param param;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	long done = 0;

	for (long i = 0; i < n; i++) {
		if (rdma_create_id(ch, &id, (void *)(uintptr_t)i, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, dst, TIMEOUT_MS))
			die("rdma_resolve_addr");
	}
	while (done < n) {
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event");
		enum rdma_cm_event_type type = ev->event;
		int ok = !ev->status;

		id = ev->id;
		if (!ok || (type != RDMA_CM_EVENT_ADDR_RESOLVED && type != RDMA_CM_EVENT_ROUTE_RESOLVED &&
			    type != RDMA_CM_EVENT_CONNECT_RESPONSE && type != RDMA_CM_EVENT_DISCONNECTED)) {
			failed(o, "event", ev);
			ok = 0;
		}
		rdma_ack_cm_event(ev);
		if (ok && type == RDMA_CM_EVENT_ADDR_RESOLVED) {
			if (rdma_resolve_route(id, TIMEOUT_MS))
				die("rdma_resolve_route");
			continue;
		}
		if (ok && type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
			conn_param(&param, qpn + (unsigned)(uintptr_t)id->context);
			if (!rdma_connect(id, &param))
				continue;
			failed(o, "rdma_connect", NULL);
		} else if (ok && type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
			if (!rdma_establish(id)) {
				o->established++;
				if (!rdma_disconnect(id))
					continue;
			}
			failed(o, "rdma_establish/disconnect", NULL);
		} else if (ok) { /* DISCONNECTED: the DREP came */
			o->completed++;
		}
		rdma_destroy_id(id);
		done++;
	}
}

static double tv_diff(const struct timeval *a, const struct timeval *b)
{
	return (double)(a->tv_sec - b->tv_sec) + (a->tv_usec - b->tv_usec) / 1e6;
}

static int connect_mode(int argc, char **argv)
{
	struct sockaddr_storage dst;
	struct rdma_event_channel *ch;
	struct outcome o = {0, 0, 0, ""};
	double t[T_STEPS] = {0}, t0, total;
	struct rusage ru0, ru; /* the CPU time of the run: user and system, seconds */

	if (argc < 7) {
		fprintf(stderr, "usage: %s connect DST PORT N serial|pipelined QPN\n", argv[0]);
		return 2;
	}
	parse_dst(argv[2], &dst);
	((struct sockaddr_in *)&dst)->sin_port = htons(atoi(argv[3])); /* sin6_port is at the same offset */
	long n = atol(argv[4]);
	int is_serial = !strcmp(argv[5], "serial");
	unsigned qpn = (unsigned)strtoul(argv[6], NULL, 0);

	if (!is_serial && strcmp(argv[5], "pipelined"))
		die("mode: serial or pipelined");
	if (qpn < QPN_LO || qpn + n > QPN_HI)
		die("QPN out of 0x100000..0xfffffe-N");
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	getrusage(RUSAGE_SELF, &ru0);
	t0 = now();
	if (is_serial)
		serial(ch, (struct sockaddr *)&dst, n, qpn, &o, t);
	else
		pipelined(ch, (struct sockaddr *)&dst, n, qpn, &o);
	total = now() - t0;
	rdma_destroy_event_channel(ch);
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"n\": %ld, \"mode\": \"%s\", \"total\": %.9f, \"established\": %ld, \"completed\": %ld, "
	       "\"failures\": %ld, \"first_failure\": \"%s\", \"user\": %.6f, \"sys\": %.6f, \"minflt\": %ld, "
	       "\"nvcsw\": %ld", n, argv[5], total, o.established, o.completed, o.failures, o.first_failure,
	       tv_diff(&ru.ru_utime, &ru0.ru_utime), tv_diff(&ru.ru_stime, &ru0.ru_stime),
	       ru.ru_minflt - ru0.ru_minflt, ru.ru_nvcsw - ru0.ru_nvcsw);
	if (is_serial)
		for (int k = 0; k < T_STEPS; k++)
			printf(", \"%s\": %.9f", step_names[k], t[k]);
	printf("}\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage dst;
	struct rdma_event_channel *ch;
	struct rdma_cm_id **ids;
	double t[4];

	if (argc < 3) {
		fprintf(stderr, "usage: %s phases|memory|resolve|connect DST [N [RUNS]] | listen PORT\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "listen"))
		return listen_mode(atoi(argv[2]));
	if (!strcmp(argv[1], "connect"))
		return connect_mode(argc, argv);
	parse_dst(argv[2], &dst);

	if (!strcmp(argv[1], "resolve")) {
		struct rdma_cm_event *ev;
		struct rdma_cm_id *id;
		char text[INET6_ADDRSTRLEN] = "?";

		ch = rdma_create_event_channel();
		if (!ch)
			die("rdma_create_event_channel");
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, TIMEOUT_MS))
			die("rdma_resolve_addr");
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event");
		int ok = ev->event == RDMA_CM_EVENT_ADDR_RESOLVED;
		rdma_ack_cm_event(ev);
		struct sockaddr *src = rdma_get_local_addr(id);
		if (src->sa_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)src)->sin_addr, text, sizeof(text));
		else if (src->sa_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)src)->sin6_addr, text, sizeof(text));
		printf("%s %s via %s\n", ok ? "resolved" : "failed", argv[2], text);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ch);
		return ok ? 0 : 1;
	}

	if (argc < 4)
		die("N missing");
	long n = atol(argv[3]);
	int runs = argc > 4 ? atoi(argv[4]) : 1;
	ids = calloc(n, sizeof(*ids));
	if (!ids)
		die("calloc");

	if (!strcmp(argv[1], "memory")) {
		ch = rdma_create_event_channel();
		if (!ch)
			die("rdma_create_event_channel");
		long base = rss_bytes();
		long bad = setup(ch, ids, n, (struct sockaddr *)&dst, NULL);
		long live = rss_bytes();
		for (long i = 0; i < n; i++)
			rdma_destroy_id(ids[i]);
		rdma_destroy_event_channel(ch);
		printf("{\"n\": %ld, \"rss_base\": %ld, \"rss_live\": %ld, \"peak_rss\": %ld, "
		       "\"failures\": %ld}\n", n, base, live, peak_rss_bytes(), bad);
		return 0;
	}

	if (strcmp(argv[1], "phases"))
		die("unknown mode");
	for (int run = 0; run < runs; run++) {
		ch = rdma_create_event_channel();
		if (!ch)
			die("rdma_create_event_channel");
		long bad = setup(ch, ids, n, (struct sockaddr *)&dst, t);
		double t3 = now();
		for (long i = 0; i < n; i++)
			if (rdma_destroy_id(ids[i]))
				die("rdma_destroy_id");
		t[3] = now() - t3;
		rdma_destroy_event_channel(ch);
		printf("{\"n\": %ld, \"create\": %.9f, \"resolve_addr\": %.9f, "
		       "\"resolve_route\": %.9f, \"destroy\": %.9f, \"failures\": %ld}\n",
		       n, t[0], t[1], t[2], t[3], bad);
		fflush(stdout);
	}
	free(ids);
	return 0;
}
