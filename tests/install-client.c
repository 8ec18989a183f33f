/* SPDX-License-Identifier: MIT */
/*
 * install-client: a client built the way a user builds one, against the
 * installed placefs/client.h and libplacefs-client.a through pkg-config (make
 * installcheck). It includes nothing of the build tree, not even config.h.
 * Exits 0 when the calls that need no mount behave as documented.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <placefs/client.h>

int main(void)
{
	struct placefs_client_error err;
	struct placefs_ioc_ring_info ri;
	struct placefs_client_dest *d = NULL;
	int fd, rc;

	if (strcmp(placefs_client_errno_name(-EFBIG), "EFBIG") != 0) {
		fprintf(stderr, "install-client: placefs_client_errno_name is wrong\n");
		return 1;
	}
	rc = placefs_client_open("/dev/null", &fd, &err);
	if (rc != 0) {
		fprintf(stderr, "install-client: %s\n", err.msg);
		return 1;
	}
	/* /dev/null is no tensor file: the ring info ioctl must fail with ENOTTY. */
	rc = placefs_client_ring_info(fd, &ri, &err);
	close(fd);
	if (rc != -ENOTTY || err.msg[0] == '\0') {
		fprintf(stderr, "install-client: ring info on /dev/null gave %d (%s)\n", rc,
		        err.msg);
		return 1;
	}
	memset(&ri, 0, sizeof(ri));
	ri.backend = PLACEFS_IOC_BACKEND_NONE;
	if (placefs_client_dest_create(&ri, 4096, &d, &err) != -ENODEV || d) {
		fprintf(stderr, "install-client: dest_create without staging did not say ENODEV\n");
		return 1;
	}
	{
		uint64_t index = 0;

		rc = placefs_client_index("/dev/null", &index, &err);
		if (rc >= 0 || strstr(err.msg, "/dev/null") == NULL) {
			fprintf(stderr, "install-client: /dev/null has a plan index (%d)\n", rc);
			return 1;
		}
	}
	{
		/* /dev has no .placefs/packed.tsv: ENOENT, a message naming it, no result. */
		struct placefs_client_packed *pk = NULL;

		rc = placefs_client_packed_read("/dev", &pk, &err);
		if (rc != -ENOENT || pk || strstr(err.msg, "/dev/.placefs/packed.tsv") == NULL) {
			fprintf(stderr, "install-client: packed.tsv of /dev gave %d (%s)\n", rc,
			        err.msg);
			return 1;
		}
		placefs_client_packed_free(pk);
	}
	printf("install-client: placefs/client.h and libplacefs-client.a work as installed\n");
	return 0;
}
