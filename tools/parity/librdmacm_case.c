/*
 * One parity scenario through librdmacm, for tests/kernel/test_parity.py.
 *
 * The steps come as arguments (the same language as pyrdmacm_case.py):
 *   sync             ids get no event channel (librdmacm's synchronous mode); before create
 *   create PS        rdma_create_id; PS is tcp, udp, ipoib or ib
 *   bind ADDR        rdma_bind_addr
 *   resolve DST SRC TIMEOUT_MS   rdma_resolve_addr; SRC "-" for none
 *   route TIMEOUT_MS rdma_resolve_route
 *   wait             rdma_get_cm_event (after up to 10 s of poll), then rdma_ack_cm_event
 *   wait-noack       the same without the ack (librdmacm's destroy then blocks for ever)
 *   info             what the id says about itself: addresses, ports, device, GIDs
 *   destroy          rdma_destroy_id
 * ADDR is numeric IPv4 or IPv6 (with %zone), "[ADDR]:PORT" or "ADDR:PORT" for IPv4, or
 * "gid:GID" for an AF_IB address with pkey 0xffff.
 *
 * Output: one JSON object on stdout, flushed step by step (a run killed in a hang leaves the
 * steps done so far). Before the first step the program writes the marker
 * "parity-start" to fd -1 (the write fails with EBADF), so that an strace of it can tell
 * librdmacm's start-up probe from the scenario's own commands.
 *
 * Build: cc -O2 -o librdmacm_case librdmacm_case.c -lrdmacm -libverbs
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/ib.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int first = 1;

static void sep(void)
{
	if (!first)
		printf(", ");
	first = 0;
}

static void record_call(const char *call, int ret, int err)
{
	sep();
	printf("{\"call\": \"%s\", \"ret\": %d, \"errno\": %d}", call, ret, ret ? err : 0);
}

static int parse_addr(const char *text, struct sockaddr_storage *ss)
{
	char host[128], *port = NULL, *end;
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *res;

	memset(ss, 0, sizeof(*ss));
	if (!strncmp(text, "gid:", 4)) {
		struct sockaddr_ib *sib = (struct sockaddr_ib *)ss;

		sib->sib_family = AF_IB;
		sib->sib_pkey = htons(0xffff);
		return inet_pton(AF_INET6, text + 4, &sib->sib_addr) == 1 ? 0 : -1;
	}
	snprintf(host, sizeof(host), "%s", text);
	if (host[0] == '[') {
		end = strchr(host, ']');
		if (!end)
			return -1;
		*end = 0;
		if (end[1] == ':')
			port = end + 2;
		memmove(host, host + 1, strlen(host + 1) + 1);
	} else if (strchr(host, ':') == strrchr(host, ':') && strchr(host, ':')) {
		port = strchr(host, ':');
		*port++ = 0;
	}
	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static void print_sockaddr(const char *name, struct sockaddr *sa)
{
	char text[INET6_ADDRSTRLEN] = "";

	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, text, sizeof(text));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, text, sizeof(text));
	else if (sa->sa_family == AF_IB)
		inet_ntop(AF_INET6, &((struct sockaddr_ib *)sa)->sib_addr, text, sizeof(text));
	if (sa->sa_family == AF_INET6 && ((struct sockaddr_in6 *)sa)->sin6_scope_id)
		printf(", \"%s\": \"%s%%%u\"", name, text,
		       ((struct sockaddr_in6 *)sa)->sin6_scope_id);
	else
		printf(", \"%s\": %s%s%s", name, *text ? "\"" : "", *text ? text : "null",
		       *text ? "\"" : "");
}

static void print_gid(const char *name, const union ibv_gid *gid)
{
	char text[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, gid->raw, text, sizeof(text));
	printf(", \"%s\": \"%s\"", name, text);
}

static int port_space(const char *name)
{
	if (!strcmp(name, "tcp"))
		return RDMA_PS_TCP;
	if (!strcmp(name, "udp"))
		return RDMA_PS_UDP;
	if (!strcmp(name, "ipoib"))
		return RDMA_PS_IPOIB;
	if (!strcmp(name, "ib"))
		return RDMA_PS_IB;
	return -1;
}

static void usage(const char *why)
{
	fprintf(stderr, "librdmacm_case: %s\n", why);
	exit(2);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *channel = NULL;
	struct rdma_cm_id *id = NULL;
	struct sockaddr_storage a, b;
	struct rdma_cm_event *event;
	int i, ret, sync = 0, ps;
	struct ibv_context **devices;

	/* librdmacm initialises (and probes AF_IB support) on first use. */
	devices = rdma_get_devices(NULL);
	if (devices)
		rdma_free_devices(devices);
	if (write(-1, "parity-start", 12) != -1)
		return 3;
	printf("{\"impl\": \"librdmacm\", \"steps\": [");
	fflush(stdout);
	for (i = 1; i < argc; i++) {
		const char *step = argv[i];

		if (!strcmp(step, "sync")) {
			sync = 1;
		} else if (!strcmp(step, "create") && i + 1 < argc) {
			ps = port_space(argv[++i]);
			if (ps < 0)
				usage("unknown port space");
			if (!sync && !channel) {
				channel = rdma_create_event_channel();
				if (!channel)
					usage("rdma_create_event_channel failed");
			}
			ret = rdma_create_id(sync ? NULL : channel, &id, NULL, ps);
			record_call("create_id", ret, errno);
		} else if (!strcmp(step, "bind") && i + 1 < argc) {
			if (parse_addr(argv[++i], &a))
				usage("bad address");
			ret = rdma_bind_addr(id, (struct sockaddr *)&a);
			record_call("bind_addr", ret, errno);
		} else if (!strcmp(step, "resolve") && i + 3 < argc) {
			const char *src = argv[i + 2];

			if (parse_addr(argv[i + 1], &b) || (strcmp(src, "-") && parse_addr(src, &a)))
				usage("bad address");
			ret = rdma_resolve_addr(id, strcmp(src, "-") ? (struct sockaddr *)&a : NULL,
						(struct sockaddr *)&b, atoi(argv[i + 3]));
			record_call("resolve_addr", ret, errno);
			i += 3;
		} else if (!strcmp(step, "route") && i + 1 < argc) {
			ret = rdma_resolve_route(id, atoi(argv[++i]));
			record_call("resolve_route", ret, errno);
		} else if (!strcmp(step, "wait") || !strcmp(step, "wait-noack")) {
			struct pollfd pfd = {.fd = channel ? channel->fd : -1, .events = POLLIN};

			if (!channel || poll(&pfd, 1, 10000) != 1) {
				sep();
				printf("{\"call\": \"get_cm_event\", \"ret\": -1, \"errno\": %d}",
				       channel ? ETIMEDOUT : EINVAL);
				continue;
			}
			ret = rdma_get_cm_event(channel, &event);
			if (ret) {
				record_call("get_cm_event", ret, errno);
				continue;
			}
			sep();
			printf("{\"call\": \"get_cm_event\", \"ret\": 0, \"errno\": 0, "
			       "\"event\": \"%s\", \"status\": %d}",
			       rdma_event_str(event->event), event->status);
			if (!strcmp(step, "wait"))
				rdma_ack_cm_event(event);
		} else if (!strcmp(step, "info")) {
			sep();
			printf("{\"call\": \"info\"");
			print_sockaddr("local", rdma_get_local_addr(id));
			print_sockaddr("peer", rdma_get_peer_addr(id));
			printf(", \"src_port\": %u, \"dst_port\": %u", ntohs(rdma_get_src_port(id)),
			       ntohs(rdma_get_dst_port(id)));
			if (id->verbs)
				printf(", \"device\": \"%s\"", ibv_get_device_name(id->verbs->device));
			else
				printf(", \"device\": null");
			printf(", \"port_num\": %u, \"pkey\": %u", id->port_num,
			       ntohs(id->route.addr.addr.ibaddr.pkey));
			print_gid("sgid", &id->route.addr.addr.ibaddr.sgid);
			print_gid("dgid", &id->route.addr.addr.ibaddr.dgid);
			printf(", \"num_paths\": %d}", id->route.num_paths);
		} else if (!strcmp(step, "destroy")) {
			ret = rdma_destroy_id(id);
			record_call("destroy_id", ret, errno);
			id = NULL;
		} else {
			usage("unknown step or missing argument");
		}
		fflush(stdout);
	}
	printf("]}\n");
	return 0;
}
