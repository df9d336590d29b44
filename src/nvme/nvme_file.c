/*
 * nvme_file.c: the NVMe offload's swap files (aio.h, "files"): the folder and its free space checked before
 * anything is written, O_DIRECT or a clear refusal naming the filesystem, the space reserved up front.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../base/common.h"
#include "aio.h"

int64_t nvme_free_bytes(const char* dir) {
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return -1;
    return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

void nvme_fs_name(const char* dir, char* out, size_t n) {
    static const struct {
        unsigned long magic;
        const char* name;
    } fs[] = {{0x01021994, "tmpfs"}, {0xEF53, "ext4"}, {0x58465342, "xfs"}, {0x9123683E, "btrfs"},
              {0x794c7630, "overlayfs"}, {0x6969, "nfs"}, {0xFF534D42, "cifs"}, {0x65735546, "fuse"},
              {0x858458f6, "ramfs"}, {0x2fc12fc1, "zfs"}, {0x5346544e, "ntfs"}, {0x4d44, "vfat"},
              {0x73717368, "squashfs"}, {0xF2F52010, "f2fs"}, {0x47504653, "gpfs"}, {0x0bd00bd0, "lustre"}};
    struct statfs s;
    if (statfs(dir, &s) != 0) {
        snprintf(out, n, "unknown");
        return;
    }
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        if ((unsigned long)s.f_type == fs[i].magic) {
            snprintf(out, n, "%s", fs[i].name);
            return;
        }
    snprintf(out, n, "type 0x%lx", (unsigned long)s.f_type);
}

void* nvme_alloc(size_t bytes) {
    void* p = NULL;
    if (posix_memalign(&p, NVME_ALIGN, nvme_align_up(bytes ? bytes : 1)) != 0) return NULL;
    return p;
}

static int space_error(const char* dir, uint64_t bytes, char* err, size_t errlen) {
    const int64_t fr = nvme_free_bytes(dir);
    return t5_errf(err, errlen, T5_EXIT_FAILURE,
                   "nvme_path %s: %" PRIu64 " bytes (%.2f GiB) needed for the swap file, %" PRId64
                   " bytes (%.2f GiB) free. HINT: free space there or point nvme_path at a larger disk",
                   dir, bytes, (double)bytes / (1 << 30), fr, (double)fr / (1 << 30));
}

int nvme_path_check(const char* dir, uint64_t bytes, char* err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "nvme_path %s: %s. HINT: create the folder first (mkdir -p %s)",
                       dir, strerror(errno), dir);
    if (!S_ISDIR(st.st_mode)) return t5_errf(err, errlen, T5_EXIT_USAGE, "nvme_path %s is not a folder", dir);
    const int64_t fr = nvme_free_bytes(dir);
    if (fr >= 0 && (uint64_t)fr < bytes) return space_error(dir, bytes, err, errlen);
    return 0;
}

int nvme_file_create(const char* dir, const char* name, uint64_t bytes, int* fd, char* err, size_t errlen) {
    *fd = -1;
    int rc = nvme_path_check(dir, bytes, err, errlen);
    if (rc) return rc;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "nvme_path %s: the path is too long", dir);
    int f = nvme_test_hooks.open_einval ? (errno = EINVAL, -1) : open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
    if (f < 0 && errno == EINVAL) {
        char fs[64];
        nvme_fs_name(dir, fs, sizeof fs);
        unlink(path);  // some filesystems create the file before refusing the flag (only ours: O_EXCL)
        return t5_errf(err, errlen, T5_EXIT_FAILURE,
                       "nvme_path %s is on a %s filesystem, which refuses O_DIRECT (open: Invalid argument). HINT: "
                       "point nvme_path at a folder on a local disk (ext4, xfs)",
                       dir, fs);
    }
    if (f < 0) return t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme_path %s: cannot create %s: %s", dir, path, strerror(errno));
    unlink(path);  // the space lives until the descriptor closes: nothing is left behind, even after a crash
    if (bytes > 0 && fallocate(f, 0, 0, (off_t)bytes) != 0) {
        const int e = errno;
        if (e == ENOSPC || e == EFBIG) {
            close(f);
            if (e == EFBIG)
                return t5_errf(err, errlen, T5_EXIT_FAILURE,
                               "nvme_path %s: the swap file of %" PRIu64 " bytes exceeds the file size limit (%s)",
                               dir, bytes, strerror(e));
            return space_error(dir, bytes, err, errlen);
        }
        // no fallocate here (EOPNOTSUPP): a sparse file of that size, which reads as zeros as well
        if (ftruncate(f, (off_t)bytes) != 0) {
            const int e2 = errno;
            close(f);
            return t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme_path %s: cannot size the swap file to %" PRIu64
                           " bytes: %s", dir, bytes, strerror(e2));
        }
    }
    *fd = f;
    return 0;
}
