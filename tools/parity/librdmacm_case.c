/*
 * One parity scenario through librdmacm, for tests/kernel/test_parity.py.
 *
 * The steps come as arguments (the same language as pyrdmacm_case.py):
 *   sync             ids get no event channel (librdmacm's synchronous mode); before create
 *   @NAME            the steps that follow act on the id called NAME (until the next @NAME);
 *                    before any, on an id with no name.  All ids share one event channel.
 *   create PS        rdma_create_id; PS is tcp, udp, ipoib or ib
 *   bind ADDR        rdma_bind_addr
 *   resolve DST SRC TIMEOUT_MS   rdma_resolve_addr; SRC "-" for none
 *   route TIMEOUT_MS rdma_resolve_route
 *   listen BACKLOG   rdma_listen
 *   wait             rdma_get_cm_event (after up to 10 s of poll), then rdma_ack_cm_event
 *   wait-noack       the same without the ack (librdmacm's destroy then blocks for ever)
 *   wait-event NAME  events (of any id) until one of type NAME (RDMA_CM_EVENT_ left out), each
 *                    acked; its report says which id ("on"), its status and, for the connection
 *                    and multicast events, the peer's qp_num, private_data_len and (datagram
 *                    ids) qkey, and the private data (hex, trailing zeros left out); the events
 *                    read before it are listed as "skipped".  CONNECT_REQUEST remembers the
 *                    request's id for get-request.
 *   get-request      the current name now stands for the id of the last CONNECT_REQUEST
 *   connect QPN [PD] rdma_connect; accept QPN [PD]  rdma_accept.  Both with a conn_param of
 *                    this fixed set: qp_num QPN (the id has no QP), responder_resources 1,
 *                    initiator_depth 1, flow_control 0, retry_count 5, rnr_retry_count 7,
 *                    srq 0, and the private data PD (hex) if given
 *   establish        rdma_establish (the RTU of an id without a QP, after CONNECT_RESPONSE)
 *   reject [PD]      rdma_reject
 *   notify           rdma_notify(IBV_EVENT_COMM_EST)
 *   disconnect       rdma_disconnect
 *   join ADDR [sendonly]  rdma_join_multicast; with sendonly rdma_join_multicast_ex with
 *                    RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
 *   leave ADDR       rdma_leave_multicast
 *   set-tos N, set-ack-timeout N   rdma_set_option, a uint8_t; set-reuseaddr, set-afonly:
 *                    rdma_set_option, an int 1
 *   init-qp-attr STATE   rdma_init_qp_attr (STATE INIT, RTR, RTS or a number): the mask and
 *                    the fields that do not change from run to run (not the PSNs, nor the
 *                    flow label)
 *   info             what the id says about itself: addresses, ports, device, GIDs
 *   destroy          rdma_destroy_id
 * ADDR is numeric IPv4 or IPv6 (with %zone), "[ADDR]:PORT" or "ADDR:PORT" for IPv4, or
 * "gid:GID" for an AF_IB address with pkey 0xffff.  QPN is a number (0x... for hex); PD is
 * an even number of hex digits.
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
#include <ctype.h>
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

#define MAX_PD 256

/* The ids of the scenario, by name ("" before any @NAME), and the last request's id. */
static struct named {
	char name[32];
	struct rdma_cm_id *id;
} ids[16];
static int nids = 1, cur;
static struct rdma_cm_id *request;

static const char *name_of(struct rdma_cm_id *id)
{
	int i;

	for (i = 0; i < nids; i++)
		if (ids[i].id == id)
			return ids[i].name;
	return "?";
}

static int is_pd(const char *text)
{
	size_t i, n = strlen(text);

	if (!n || n % 2 || n > 2 * MAX_PD)
		return 0;
	for (i = 0; i < n; i++)
		if (!isxdigit((unsigned char)text[i]))
			return 0;
	return 1;
}

/* An optional PD argument at argv[*i + 1]: its bytes into pd, their number returned. */
static int take_pd(int argc, char **argv, int *i, unsigned char *pd)
{
	size_t k, n;

	if (*i + 1 >= argc || !is_pd(argv[*i + 1]))
		return 0;
	n = strlen(argv[++*i]) / 2;
	for (k = 0; k < n; k++) {
		unsigned int byte;

		sscanf(argv[*i] + 2 * k, "%2x", &byte);
		pd[k] = byte;
	}
	return n;
}

static void print_pd(const void *data, int len)
{
	const unsigned char *p = data;

	while (len > 0 && !p[len - 1])
		len--;
	printf(", \"pd\": \"");
	while (len-- > 0)
		printf("%02x", *p++);
	printf("\"");
}

static void print_event_param(struct rdma_cm_event *event)
{
	int ud = event->event == RDMA_CM_EVENT_MULTICAST_JOIN || event->id->qp_type == IBV_QPT_UD;

	switch (event->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_MULTICAST_JOIN:
		break;
	default:
		return;
	}
	if (ud) {
		struct rdma_ud_param *p = &event->param.ud;

		printf(", \"qp_num\": %u, \"qkey\": %u, \"pd_len\": %u", p->qp_num, p->qkey,
		       p->private_data_len);
		if (p->private_data && event->event != RDMA_CM_EVENT_MULTICAST_JOIN)
			print_pd(p->private_data, p->private_data_len);
	} else {
		struct rdma_conn_param *p = &event->param.conn;

		printf(", \"qp_num\": %u, \"pd_len\": %u", p->qp_num, p->private_data_len);
		if (p->private_data)
			print_pd(p->private_data, p->private_data_len);
	}
}

static void print_qp_attr(struct ibv_qp_attr *a, int mask)
{
	char dgid[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, a->ah_attr.grh.dgid.raw, dgid, sizeof(dgid));
	printf(", \"mask\": %d, \"qp_state\": %d, \"path_mtu\": %d, \"dest_qp_num\": %u, "
	       "\"qkey\": %u, \"qp_access_flags\": %u, \"pkey_index\": %u, \"port_num\": %u, "
	       "\"max_rd_atomic\": %u, \"max_dest_rd_atomic\": %u, \"min_rnr_timer\": %u, "
	       "\"timeout\": %u, \"retry_cnt\": %u, \"rnr_retry\": %u, \"ah_dgid\": \"%s\", "
	       "\"ah_sgid_index\": %u, \"ah_hop_limit\": %u, \"ah_traffic_class\": %u, "
	       "\"ah_is_global\": %u, \"ah_dlid\": %u, \"ah_sl\": %u, \"ah_port_num\": %u",
	       mask, a->qp_state, a->path_mtu, a->dest_qp_num, a->qkey, a->qp_access_flags,
	       a->pkey_index, a->port_num, a->max_rd_atomic, a->max_dest_rd_atomic,
	       a->min_rnr_timer, a->timeout, a->retry_cnt, a->rnr_retry, dgid,
	       a->ah_attr.grh.sgid_index, a->ah_attr.grh.hop_limit, a->ah_attr.grh.traffic_class,
	       a->ah_attr.is_global, a->ah_attr.dlid, a->ah_attr.sl, a->ah_attr.port_num);
}

static int qp_state(const char *name)
{
	if (!strcmp(name, "INIT"))
		return IBV_QPS_INIT;
	if (!strcmp(name, "RTR"))
		return IBV_QPS_RTR;
	if (!strcmp(name, "RTS"))
		return IBV_QPS_RTS;
	return atoi(name);
}

/* The fixed connection parameters of connect and accept (see the step list). */
static struct rdma_conn_param conn_param(const char *qpn, const void *pd, int pd_len)
{
	struct rdma_conn_param p = {
		.private_data = pd_len ? pd : NULL,
		.private_data_len = pd_len,
		.responder_resources = 1,
		.initiator_depth = 1,
		.flow_control = 0,
		.retry_count = 5,
		.rnr_retry_count = 7,
		.srq = 0,
		.qp_num = strtoul(qpn, NULL, 0),
	};
	return p;
}

static int set_option(struct rdma_cm_id *id, int optname, int value, int is_u8)
{
	uint8_t u8 = value;

	if (is_u8)
		return rdma_set_option(id, RDMA_OPTION_ID, optname, &u8, sizeof(u8));
	return rdma_set_option(id, RDMA_OPTION_ID, optname, &value, sizeof(value));
}

static int event_named(struct rdma_cm_event *event, const char *name)
{
	return !strcmp(rdma_event_str(event->event) + strlen("RDMA_CM_EVENT_"), name);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *channel = NULL;
	struct sockaddr_storage a, b;
	struct rdma_cm_event *event;
	int i, ret, sync = 0, ps;
	struct ibv_context **devices;
	unsigned char pd[MAX_PD];
	int pd_len;
#define ID (ids[cur].id)

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
			continue;
		} else if (step[0] == '@') {
			for (cur = 0; cur < nids && strcmp(ids[cur].name, step); cur++)
				;
			if (cur == nids) {
				if (nids == 16 || strlen(step) >= sizeof(ids[0].name))
					usage("too many ids, or a name too long");
				strcpy(ids[nids++].name, step);
			}
			continue;
		} else if (!strcmp(step, "get-request")) {
			if (!request)
				usage("get-request: no CONNECT_REQUEST came");
			ID = request;
			continue;
		} else if (!strcmp(step, "create") && i + 1 < argc) {
			ps = port_space(argv[++i]);
			if (ps < 0)
				usage("unknown port space");
			if (!sync && !channel) {
				channel = rdma_create_event_channel();
				if (!channel)
					usage("rdma_create_event_channel failed");
			}
			ret = rdma_create_id(sync ? NULL : channel, &ID, NULL, ps);
			record_call("create_id", ret, errno);
		} else if (!strcmp(step, "bind") && i + 1 < argc) {
			if (parse_addr(argv[++i], &a))
				usage("bad address");
			ret = rdma_bind_addr(ID, (struct sockaddr *)&a);
			record_call("bind_addr", ret, errno);
		} else if (!strcmp(step, "resolve") && i + 3 < argc) {
			const char *src = argv[i + 2];

			if (parse_addr(argv[i + 1], &b) || (strcmp(src, "-") && parse_addr(src, &a)))
				usage("bad address");
			ret = rdma_resolve_addr(ID, strcmp(src, "-") ? (struct sockaddr *)&a : NULL,
						(struct sockaddr *)&b, atoi(argv[i + 3]));
			record_call("resolve_addr", ret, errno);
			i += 3;
		} else if (!strcmp(step, "route") && i + 1 < argc) {
			ret = rdma_resolve_route(ID, atoi(argv[++i]));
			record_call("resolve_route", ret, errno);
		} else if (!strcmp(step, "listen") && i + 1 < argc) {
			ret = rdma_listen(ID, atoi(argv[++i]));
			record_call("listen", ret, errno);
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
		} else if (!strcmp(step, "wait-event") && i + 1 < argc) {
			struct pollfd pfd = {.fd = channel ? channel->fd : -1, .events = POLLIN};
			const char *want = argv[++i];
			char skipped[1024] = "";

			for (;;) {
				if (!channel || poll(&pfd, 1, 10000) != 1) {
					sep();
					printf("{\"call\": \"wait_event\", \"ret\": -1, \"errno\": %d, "
					       "\"skipped\": [%s]}", channel ? ETIMEDOUT : EINVAL, skipped);
					break;
				}
				ret = rdma_get_cm_event(channel, &event);
				if (ret) {
					record_call("wait_event", ret, errno);
					break;
				}
				if (!event_named(event, want)) {
					snprintf(skipped + strlen(skipped), sizeof(skipped) - strlen(skipped),
						 "%s\"%s\"", *skipped ? ", " : "", rdma_event_str(event->event));
					rdma_ack_cm_event(event);
					continue;
				}
				sep();
				printf("{\"call\": \"wait_event\", \"ret\": 0, \"errno\": 0, "
				       "\"event\": \"%s\", \"status\": %d, \"on\": \"%s\"",
				       rdma_event_str(event->event), event->status,
				       name_of(event->event == RDMA_CM_EVENT_CONNECT_REQUEST ?
					       event->listen_id : event->id));
				print_event_param(event);
				printf(", \"skipped\": [%s]}", skipped);
				if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST)
					request = event->id;
				rdma_ack_cm_event(event);
				break;
			}
		} else if (!strcmp(step, "connect") && i + 1 < argc) {
			const char *qpn = argv[++i];
			struct rdma_conn_param p;

			pd_len = take_pd(argc, argv, &i, pd);
			p = conn_param(qpn, pd, pd_len);
			ret = rdma_connect(ID, &p);
			record_call("connect", ret, errno);
		} else if (!strcmp(step, "accept") && i + 1 < argc) {
			const char *qpn = argv[++i];
			struct rdma_conn_param p;

			pd_len = take_pd(argc, argv, &i, pd);
			p = conn_param(qpn, pd, pd_len);
			ret = rdma_accept(ID, &p);
			record_call("accept", ret, errno);
		} else if (!strcmp(step, "establish")) {
			ret = rdma_establish(ID);
			record_call("establish", ret, errno);
		} else if (!strcmp(step, "reject")) {
			pd_len = take_pd(argc, argv, &i, pd);
			ret = rdma_reject(ID, pd_len ? pd : NULL, pd_len);
			record_call("reject", ret, errno);
		} else if (!strcmp(step, "notify")) {
			ret = rdma_notify(ID, IBV_EVENT_COMM_EST);
			record_call("notify", ret, errno);
		} else if (!strcmp(step, "disconnect")) {
			ret = rdma_disconnect(ID);
			record_call("disconnect", ret, errno);
		} else if (!strcmp(step, "join") && i + 1 < argc) {
			if (parse_addr(argv[++i], &a))
				usage("bad address");
			if (i + 1 < argc && !strcmp(argv[i + 1], "sendonly")) {
				struct rdma_cm_join_mc_attr_ex attr = {
					.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS |
						     RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
					.addr = (struct sockaddr *)&a,
				};

				i++;
				ret = rdma_join_multicast_ex(ID, &attr, NULL);
			} else {
				ret = rdma_join_multicast(ID, (struct sockaddr *)&a, NULL);
			}
			record_call("join_multicast", ret, errno);
		} else if (!strcmp(step, "leave") && i + 1 < argc) {
			if (parse_addr(argv[++i], &a))
				usage("bad address");
			ret = rdma_leave_multicast(ID, (struct sockaddr *)&a);
			record_call("leave_multicast", ret, errno);
		} else if (!strcmp(step, "set-tos") && i + 1 < argc) {
			ret = set_option(ID, RDMA_OPTION_ID_TOS, atoi(argv[++i]), 1);
			record_call("set_option", ret, errno);
		} else if (!strcmp(step, "set-ack-timeout") && i + 1 < argc) {
			ret = set_option(ID, RDMA_OPTION_ID_ACK_TIMEOUT, atoi(argv[++i]), 1);
			record_call("set_option", ret, errno);
		} else if (!strcmp(step, "set-reuseaddr")) {
			ret = set_option(ID, RDMA_OPTION_ID_REUSEADDR, 1, 0);
			record_call("set_option", ret, errno);
		} else if (!strcmp(step, "set-afonly")) {
			ret = set_option(ID, RDMA_OPTION_ID_AFONLY, 1, 0);
			record_call("set_option", ret, errno);
		} else if (!strcmp(step, "init-qp-attr") && i + 1 < argc) {
			struct ibv_qp_attr attr = {.qp_state = qp_state(argv[++i])};
			int mask = 0;

			ret = rdma_init_qp_attr(ID, &attr, &mask);
			sep();
			printf("{\"call\": \"init_qp_attr\", \"ret\": %d, \"errno\": %d", ret,
			       ret ? errno : 0);
			if (!ret)
				print_qp_attr(&attr, mask);
			printf("}");
		} else if (!strcmp(step, "info")) {
			struct rdma_cm_id *id = ID;

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
			ret = rdma_destroy_id(ID);
			record_call("destroy_id", ret, errno);
			ID = NULL;
		} else {
			usage("unknown step or missing argument");
		}
		fflush(stdout);
	}
	printf("]}\n");
	return 0;
}
