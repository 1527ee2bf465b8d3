/*
 * alua-check: an independent ALUA client built on libiscsi (not aluad's Go
 * initiator). It logs in to every URL given (one session per path), then
 * reads commands on stdin and answers one line per command, so a test can
 * interleave array-side actions (aluad move) with host-side observations.
 *
 *   tur I           TEST UNIT READY on path I   -> "tur I GOOD" | "tur I CHECK k/asc/ascq"
 *   inq I           standard INQUIRY            -> "inq I tpgs=N"
 *   vpd83 I         VPD page 0x83               -> "vpd83 I naa=HEX relport=N tpg=N assoc4=N assoc5=N"
 *   rtpg I F        RTPG, format F (0 or 1)     -> "rtpg I fmt=F tt=N groups=ID:STATE:PREF:STATUS:P,P;..."
 *   stpg I G        STPG asking group G be AO   -> "stpg I GOOD" | "stpg I CHECK k/asc/ascq"
 *
 * Data is decoded here from the raw bytes per SPC-4 (7.8.6, 6.36), not by
 * aluad's own parsers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define MAXPATHS 16

static struct iscsi_context *ctx[MAXPATHS];
static int luns[MAXPATHS];
static int npaths;

static void check(const char *what, int i, struct scsi_task *t)
{
	if (t == NULL) {
		printf("%s %d ERROR %s\n", what, i, iscsi_get_error(ctx[i]));
	} else if (t->status == SCSI_STATUS_GOOD) {
		printf("%s %d GOOD\n", what, i);
	} else if (t->status == SCSI_STATUS_CHECK_CONDITION) {
		printf("%s %d CHECK %x/%02x/%02x\n", what, i, t->sense.key, (t->sense.ascq >> 8) & 0xff, t->sense.ascq & 0xff);
	} else {
		printf("%s %d STATUS 0x%02x\n", what, i, t->status);
	}
}

static struct scsi_task *raw(int i, unsigned char *cdb, int len, int dir, int xfer, unsigned char *out, int outlen)
{
	struct scsi_task *t = scsi_create_task(len, cdb, dir, xfer);
	struct iscsi_data d;
	if (t == NULL)
		return NULL;
	d.data = out;
	d.size = outlen;
	if (iscsi_scsi_command_sync(ctx[i], luns[i], t, out ? &d : NULL) == NULL) {
		scsi_free_scsi_task(t);
		return NULL;
	}
	return t;
}

static void do_inq(int i)
{
	struct scsi_task *t = iscsi_inquiry_sync(ctx[i], luns[i], 0, 0, 96);
	if (t == NULL || t->status != SCSI_STATUS_GOOD || t->datain.size < 6) {
		check("inq", i, t);
	} else {
		printf("inq %d tpgs=%d\n", i, (t->datain.data[5] >> 4) & 3);
	}
	if (t)
		scsi_free_scsi_task(t);
}

static void do_vpd83(int i)
{
	struct scsi_task *t = iscsi_inquiry_sync(ctx[i], luns[i], 1, 0x83, 255);
	if (t == NULL || t->status != SCSI_STATUS_GOOD || t->datain.size < 4) {
		check("vpd83", i, t);
		if (t)
			scsi_free_scsi_task(t);
		return;
	}
	unsigned char *p = t->datain.data;
	int end = 4 + ((p[2] << 8) | p[3]);
	if (end > t->datain.size)
		end = t->datain.size;
	char naa[64] = "none";
	int relport = -1, tpg = -1, a4 = -1, a5 = -1;
	for (int off = 4; off + 4 <= end;) {
		int type = p[off + 1] & 0x0f, assoc = (p[off + 1] >> 4) & 3, len = p[off + 3];
		unsigned char *d = p + off + 4;
		if (off + 4 + len > end)
			break;
		if (type == 3 && assoc == 0) {
			for (int k = 0; k < len && k < 31; k++)
				sprintf(naa + 2 * k, "%02x", d[k]);
		} else if (type == 4 && len >= 4) {
			relport = (d[2] << 8) | d[3];
			a4 = assoc;
		} else if (type == 5 && len >= 4) {
			tpg = (d[2] << 8) | d[3];
			a5 = assoc;
		}
		off += 4 + len;
	}
	printf("vpd83 %d naa=%s relport=%d tpg=%d assoc4=%d assoc5=%d\n", i, naa, relport, tpg, a4, a5);
	scsi_free_scsi_task(t);
}

static const char *state_name(int s)
{
	switch (s) {
	case 0: return "AO";
	case 1: return "ANO";
	case 2: return "STANDBY";
	case 3: return "UNAVAILABLE";
	case 0xe: return "OFFLINE";
	case 0xf: return "TRANSITIONING";
	}
	return "?";
}

static void do_rtpg(int i, int fmt)
{
	unsigned char cdb[12] = {0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0};
	if (fmt)
		cdb[1] |= 0x20;
	struct scsi_task *t = raw(i, cdb, 12, SCSI_XFER_READ, 4096, NULL, 0);
	if (t == NULL || t->status != SCSI_STATUS_GOOD || t->datain.size < 4) {
		check("rtpg", i, t);
		if (t)
			scsi_free_scsi_task(t);
		return;
	}
	unsigned char *p = t->datain.data;
	int end = 4 + (int)(((uint32_t)p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]);
	if (end > t->datain.size)
		end = t->datain.size;
	int off = 4, tt = -1, gotfmt = 0;
	if (fmt && end >= 8 && (p[4] & 0x70) == 0x10) {
		gotfmt = 1;
		tt = p[5];
		off = 8;
	}
	printf("rtpg %d fmt=%d tt=%d groups=", i, gotfmt, tt);
	while (off + 8 <= end) {
		unsigned char *d = p + off;
		int n = d[7];
		printf("%d:%s:%d:%02x:", (d[2] << 8) | d[3], state_name(d[0] & 0x0f), d[0] >> 7, d[5]);
		off += 8;
		for (int k = 0; k < n && off + 4 <= end; k++, off += 4)
			printf("%s%d", k ? "," : "", (p[off + 2] << 8) | p[off + 3]);
		printf(";");
	}
	printf("\n");
	scsi_free_scsi_task(t);
}

static void do_stpg(int i, int group)
{
	unsigned char cdb[12] = {0xa4, 0x0a, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0};
	unsigned char data[8] = {0, 0, 0, 0, 0x00, 0, group >> 8, group & 0xff};
	struct scsi_task *t = raw(i, cdb, 12, SCSI_XFER_WRITE, 8, data, 8);
	check("stpg", i, t);
	if (t)
		scsi_free_scsi_task(t);
}

int main(int argc, char **argv)
{
	const char *name = "iqn.2026-11.org.example:alua-check";
	int a = 1;
	if (argc > 2 && strcmp(argv[1], "-i") == 0) {
		name = argv[2];
		a = 3;
	}
	for (; a < argc && npaths < MAXPATHS; a++, npaths++) {
		struct iscsi_context *c = iscsi_create_context(name);
		struct iscsi_url *u = c ? iscsi_parse_full_url(c, argv[a]) : NULL;
		if (u == NULL) {
			fprintf(stderr, "alua-check: bad URL %s: %s\n", argv[a], c ? iscsi_get_error(c) : "no memory");
			return 2;
		}
		iscsi_set_targetname(c, u->target);
		iscsi_set_session_type(c, ISCSI_SESSION_NORMAL);
		iscsi_set_header_digest(c, ISCSI_HEADER_DIGEST_NONE_CRC32C);
		/* Not iscsi_full_connect_sync: it gives up on a path whose TEST
		 * UNIT READY says NOT READY (a standby port). Log in, then clear
		 * the POWER ON unit attention ourselves. */
		if (iscsi_connect_sync(c, u->portal) != 0 || iscsi_login_sync(c) != 0) {
			fprintf(stderr, "alua-check: login to %s failed: %s\n", argv[a], iscsi_get_error(c));
			return 1;
		}
		for (int k = 0; k < 5; k++) {
			struct scsi_task *t = iscsi_testunitready_sync(c, u->lun);
			int ua = t && t->status == SCSI_STATUS_CHECK_CONDITION && t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
			if (t)
				scsi_free_scsi_task(t);
			if (!ua)
				break;
		}
		ctx[npaths] = c;
		luns[npaths] = u->lun;
		iscsi_destroy_url(u);
	}
	printf("ready %d\n", npaths);
	fflush(stdout);
	char line[256], cmd[32];
	while (fgets(line, sizeof line, stdin)) {
		int i = -1, x = 0;
		int n = sscanf(line, "%31s %d %d", cmd, &i, &x);
		if (n >= 1 && strcmp(cmd, "quit") == 0)
			break;
		if (n < 2 || i < 0 || i >= npaths) {
			printf("error bad command: %s", line);
		} else if (strcmp(cmd, "tur") == 0) {
			struct scsi_task *t = iscsi_testunitready_sync(ctx[i], luns[i]);
			check("tur", i, t);
			if (t)
				scsi_free_scsi_task(t);
		} else if (strcmp(cmd, "inq") == 0) {
			do_inq(i);
		} else if (strcmp(cmd, "vpd83") == 0) {
			do_vpd83(i);
		} else if (strcmp(cmd, "rtpg") == 0) {
			do_rtpg(i, x);
		} else if (strcmp(cmd, "stpg") == 0) {
			do_stpg(i, x);
		} else {
			printf("error unknown command %s\n", cmd);
		}
		fflush(stdout);
	}
	for (int i = 0; i < npaths; i++) {
		iscsi_logout_sync(ctx[i]);
		iscsi_destroy_context(ctx[i]);
	}
	return 0;
}
