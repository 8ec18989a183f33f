/* SPDX-License-Identifier: MIT */
/*
 * io: whole reads and writes over descriptors, retrying EINTR and short
 * transfers, in one place; what kind of file system a descriptor is on.
 *
 * None of these allocate or log; each transfers at most 1 GiB per system
 * call (what Linux does anyway) so that any length is accepted.
 */
#ifndef PLACEFS_IO_H
#define PLACEFS_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Reads up to len bytes at offset off of fd into buf, stopping early only at
 * end of file. Returns the number of bytes read (less than len only at end
 * of file) or a negative errno from pread().
 */
ssize_t placefs_io_pread_full(int fd, void *buf, size_t len, uint64_t off);

/*
 * The same with read() from the current file position (pipes, FIFOs,
 * sockets, files whose offset the caller manages).
 */
ssize_t placefs_io_read_full(int fd, void *buf, size_t len);

/*
 * Writes all len bytes of buf at offset off of fd. Returns 0, or a negative
 * errno from pwrite() (-EIO when pwrite() returns 0 for a non-zero count).
 */
int placefs_io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/* The same with write() at the current file position. */
int placefs_io_write_full(int fd, const void *buf, size_t len);

/*
 * Fills buf with len bytes from getrandom() (the kernel's pool, blocking
 * only until it is first initialised), retrying EINTR and short returns.
 * Returns 0 or a negative errno.
 */
int placefs_io_random(void *buf, size_t len);

/*
 * Whether fd lies on a file system whose reads go over a network or to a
 * user-space client: FUSE (s3fs, sshfs, mountpoint-s3, JuiceFS, ...), NFS,
 * SMB/CIFS, Ceph, 9P, AFS, Lustre, GPFS. There a read waits mostly on the
 * server's round trip, not on this machine's CPUs or disks. 1 or 0; 0 when
 * fstatfs() fails.
 */
int placefs_io_on_network_fs(int fd);

/* Whether fd lies on a FUSE file system (one of the above). 1 or 0; 0 when fstatfs() fails. */
int placefs_io_on_fuse(int fd);

/*
 * One mount of /proc/self/mountinfo, as placefs_io_mountinfo_each() gives it:
 * its device ("major:minor"), its mount point (octal escapes such as \\040
 * undone) and its type ("ext4", "fuse.s3fs"; "" where the line has none).
 * The strings live until the callback returns.
 */
struct placefs_mountinfo {
	const char *dev;
	const char *point;
	const char *type;
};

/*
 * Calls each(mi, arg) for every mount in /proc/self/mountinfo, in its order
 * (the last of a stack last), until it returns non-zero. 0, or the errno of
 * opening the file. Reading mountinfo touches no mount.
 */
int placefs_io_mountinfo_each(int (*each)(const struct placefs_mountinfo *mi, void *arg),
                              void *arg);

/*
 * The type /proc/self/mountinfo gives the mount of fd's file system (the
 * one whose device, major:minor, is fd's st_dev): "ext4", "tmpfs",
 * "fuse.s3fs" (FUSE's type and the client's subtype). 0 with the type in
 * out (truncated to len - 1 bytes), -ENOENT where no mount has that device,
 * or the errno of fstat() or of reading mountinfo.
 */
int placefs_io_fs_type_name(int fd, char *out, size_t len);

#endif
