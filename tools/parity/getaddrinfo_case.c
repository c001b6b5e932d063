/*
 * librdmacm's rdma_getaddrinfo for a table of inputs, for tests/kernel/test_getaddrinfo_lab.py.
 *
 * Arguments: rows of eight words each,
 *   NODE SERVICE FLAGS FAMILY QP_TYPE PORT_SPACE SRC DST
 * "-" is NULL (NODE, SERVICE, SRC, DST) or 0 (the numbers).  FLAGS is the number of
 * hints.ai_flags, or "nohints" to pass no hints at all (NULL).  FAMILY, QP_TYPE and
 * PORT_SPACE are numbers (AF_*, IBV_QPT_*, RDMA_PS_*).  SRC and DST are numeric IPv4 or
 * IPv6 addresses (IPv6 with %zone), with a port after a '#' ("10.0.2.15#7471"), given as
 * hints.ai_src_addr / hints.ai_dst_addr.
 *
 * Output: one JSON array on stdout, an object per row: "ret" (what rdma_getaddrinfo
 * returned: 0, -1 with "errno", or the C library's EAI_* code), and for 0 "records", each
 * with ai_flags, ai_family, ai_qp_type, ai_port_space, the source and destination sockaddrs
 * in hex (as long as their lengths say), and the route and connect data's lengths.
 *
 * Build: cc -O2 -o getaddrinfo_case getaddrinfo_case.c -lrdmacm
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *arg_or_null(const char *s)
{
	return strcmp(s, "-") ? s : NULL;
}

static long number(const char *s)
{
	return strcmp(s, "-") ? strtol(s, NULL, 0) : 0;
}

/* "ADDR#PORT" (numeric) into storage; the length, or 0 for "-" */
static socklen_t parse_sockaddr(const char *text, struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res;
	char host[128], *port;
	socklen_t len;

	if (!strcmp(text, "-"))
		return 0;
	snprintf(host, sizeof(host), "%s", text);
	port = strchr(host, '#');
	if (port)
		*port++ = '\0';
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	if (getaddrinfo(host, port ? port : "0", &hints, &res)) {
		fprintf(stderr, "bad address %s\n", text);
		exit(2);
	}
	len = res->ai_addrlen;
	memcpy(ss, res->ai_addr, len);
	freeaddrinfo(res);
	return len;
}

static void hex(const char *key, const void *p, socklen_t len)
{
	const unsigned char *b = p;
	socklen_t i;

	printf("\"%s\": \"", key);
	for (i = 0; p && i < len; i++)
		printf("%02x", b[i]);
	printf("\"");
}

int main(int argc, char **argv)
{
	int i, first = 1;

	if ((argc - 1) % 8) {
		fprintf(stderr, "usage: %s (NODE SERVICE FLAGS FAMILY QP_TYPE PORT_SPACE SRC DST)...\n", argv[0]);
		return 2;
	}
	printf("[");
	for (i = 1; i < argc; i += 8) {
		struct sockaddr_storage src, dst;
		struct rdma_addrinfo hints, *res = NULL, *r;
		int ret, err, rfirst = 1;

		memset(&hints, 0, sizeof(hints));
		hints.ai_flags = strcmp(argv[i + 2], "nohints") ? number(argv[i + 2]) : 0;
		hints.ai_family = number(argv[i + 3]);
		hints.ai_qp_type = number(argv[i + 4]);
		hints.ai_port_space = number(argv[i + 5]);
		hints.ai_src_len = parse_sockaddr(argv[i + 6], &src);
		hints.ai_src_addr = hints.ai_src_len ? (struct sockaddr *)&src : NULL;
		hints.ai_dst_len = parse_sockaddr(argv[i + 7], &dst);
		hints.ai_dst_addr = hints.ai_dst_len ? (struct sockaddr *)&dst : NULL;

		errno = 0;
		ret = rdma_getaddrinfo(arg_or_null(argv[i]), arg_or_null(argv[i + 1]),
				       strcmp(argv[i + 2], "nohints") ? &hints : NULL, &res);
		err = errno;
		printf("%s\n{\"ret\": %d, \"errno\": %d, \"records\": [", first ? "" : ",", ret, ret == -1 ? err : 0);
		first = 0;
		for (r = ret ? NULL : res; r; r = r->ai_next) {
			printf("%s{\"ai_flags\": %d, \"ai_family\": %d, \"ai_qp_type\": %d, \"ai_port_space\": %d, ",
			       rfirst ? "" : ", ", r->ai_flags, r->ai_family, r->ai_qp_type, r->ai_port_space);
			hex("src", r->ai_src_addr, r->ai_src_len);
			printf(", ");
			hex("dst", r->ai_dst_addr, r->ai_dst_len);
			printf(", \"route_len\": %zu, \"connect_len\": %zu, \"src_canonname\": %s, \"dst_canonname\": %s}",
			       r->ai_route_len, r->ai_connect_len, r->ai_src_canonname ? "true" : "false",
			       r->ai_dst_canonname ? "true" : "false");
			rfirst = 0;
		}
		printf("]}");
		if (!ret)
			rdma_freeaddrinfo(res);
	}
	printf("]\n");
	return 0;
}
