/*
 * The C side of tools/bench: the same phases, calling librdmacm.
 *
 *   bench_librdmacm phases DST N RUNS   one JSON line per run: seconds per phase
 *   bench_librdmacm memory DST N        RSS before and with N resolved ids, peak RSS
 *   bench_librdmacm resolve DST         resolve DST once and print the source address
 *
 * Phases, all on one event channel: create N ids; resolve_addr for all, then
 * collect N events; resolve_route likewise; destroy all. Built by tools/bench
 * with `gcc -O2 ... -lrdmacm` (package librdmacm-dev).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv)
{
	struct sockaddr_storage dst;
	struct rdma_event_channel *ch;
	struct rdma_cm_id **ids;
	double t[4];

	if (argc < 3) {
		fprintf(stderr, "usage: %s phases|memory|resolve DST [N [RUNS]]\n", argv[0]);
		return 2;
	}
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
