/*
 * writeperf: 4 KiB (or -b blocks) random WRITE(16)s at a queue depth for a
 * bounded time through libiscsi's asynchronous API, the write counterpart
 * of libiscsi's iscsi-perf: a C client light enough that the targets'
 * cost decides the figure. Prints "iops N errors E".
 *
 *   writeperf [-m queue_depth] [-b blocks] [-t seconds] iscsi://host:port/iqn/lun
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

struct state {
	struct iscsi_context *ctx;
	int lun, blocks, bs;
	uint64_t span; /* writes start at LBAs below this, in units of blocks */
	unsigned char *data;
	long done, errors, inflight;
	int stopping;
	uint64_t seed;
};

static uint64_t next_rand(struct state *s)
{
	s->seed ^= s->seed << 13;
	s->seed ^= s->seed >> 7;
	s->seed ^= s->seed << 17;
	return s->seed;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void issue(struct state *s);

static void done_cb(struct iscsi_context *ctx, int status, void *command_data, void *private_data)
{
	struct state *s = private_data;
	(void)ctx;
	s->inflight--;
	if (status == SCSI_STATUS_GOOD)
		s->done++;
	else
		s->errors++;
	if (command_data)
		scsi_free_scsi_task(command_data);
	if (!s->stopping)
		issue(s);
}

static void issue(struct state *s)
{
	uint64_t lba = next_rand(s) % s->span * s->blocks;
	if (iscsi_write16_task(s->ctx, s->lun, lba, s->data, s->blocks * s->bs, s->bs,
			       0, 0, 0, 0, 0, done_cb, s) == NULL) {
		fprintf(stderr, "writeperf: %s\n", iscsi_get_error(s->ctx));
		exit(1);
	}
	s->inflight++;
}

int main(int argc, char **argv)
{
	struct state s = {.blocks = 8, .seed = 88172645463325252ULL};
	int qd = 16, secs = 5, opt;
	while ((opt = getopt(argc, argv, "m:b:t:")) != -1) {
		switch (opt) {
		case 'm': qd = atoi(optarg); break;
		case 'b': s.blocks = atoi(optarg); break;
		case 't': secs = atoi(optarg); break;
		default: goto usage;
		}
	}
	if (optind != argc - 1 || qd < 1 || qd > 256 || s.blocks < 1 || secs < 1 || secs > 120)
		goto usage;
	s.ctx = iscsi_create_context("iqn.2026-11.org.aluad:writeperf");
	struct iscsi_url *u = s.ctx ? iscsi_parse_full_url(s.ctx, argv[optind]) : NULL;
	if (u == NULL) {
		fprintf(stderr, "writeperf: bad URL %s\n", argv[optind]);
		return 1;
	}
	iscsi_set_session_type(s.ctx, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(s.ctx, ISCSI_HEADER_DIGEST_NONE);
	if (iscsi_full_connect_sync(s.ctx, u->portal, u->lun) != 0) {
		fprintf(stderr, "writeperf: login failed: %s\n", iscsi_get_error(s.ctx));
		return 1;
	}
	s.lun = u->lun;
	struct scsi_task *t = NULL;
	for (int i = 0; i < 8; i++) { /* a new nexus's unit attentions */
		t = iscsi_readcapacity16_sync(s.ctx, s.lun);
		if (t && t->status == SCSI_STATUS_GOOD)
			break;
		if (t)
			scsi_free_scsi_task(t);
		t = NULL;
	}
	struct scsi_readcapacity16 *rc = t ? scsi_datain_unmarshall(t) : NULL;
	if (rc == NULL) {
		fprintf(stderr, "writeperf: READ CAPACITY(16) failed: %s\n", iscsi_get_error(s.ctx));
		return 1;
	}
	s.bs = rc->block_length;
	uint64_t nblocks = rc->returned_lba + 1;
	if (nblocks > (1ULL << 30) / s.bs)
		nblocks = (1ULL << 30) / s.bs; /* the first GiB, as writeload */
	s.span = nblocks / s.blocks;
	scsi_free_scsi_task(t);
	s.data = malloc(s.blocks * s.bs);
	for (int i = 0; i < s.blocks * s.bs; i++)
		s.data[i] = i;
	double start = now(), end = start + secs;
	for (int i = 0; i < qd; i++)
		issue(&s);
	while (s.inflight > 0) {
		if (!s.stopping && now() >= end)
			s.stopping = 1;
		struct pollfd pfd = {.fd = iscsi_get_fd(s.ctx), .events = iscsi_which_events(s.ctx)};
		if (poll(&pfd, 1, 100) < 0 && errno != EINTR) {
			perror("writeperf: poll");
			return 1;
		}
		if (iscsi_service(s.ctx, pfd.revents) < 0) {
			fprintf(stderr, "writeperf: %s\n", iscsi_get_error(s.ctx));
			return 1;
		}
	}
	double el = now() - start;
	printf("iops %.0f errors %ld\n", s.done / el, s.errors);
	iscsi_logout_sync(s.ctx);
	iscsi_destroy_url(u);
	iscsi_destroy_context(s.ctx);
	return s.errors ? 1 : 0;
usage:
	fprintf(stderr, "usage: writeperf [-m queue_depth 1-256] [-b blocks] [-t seconds 1-120] iscsi://host:port/iqn/lun\n");
	return 2;
}
