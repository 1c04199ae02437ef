/* tests/macos/fcntl.h — for the macOS syntax check (tests/check_macos.py):
 * the host's <fcntl.h> less what macOS lacks (O_DIRECT, posix_fadvise),
 * plus the Darwin fcntl commands compat.h uses, with the values and layout
 * of Apple's <sys/fcntl.h>. Not a build header. */
#include_next <fcntl.h>
#undef O_DIRECT
#undef POSIX_FADV_NORMAL
#undef POSIX_FADV_RANDOM
#undef POSIX_FADV_SEQUENTIAL
#undef POSIX_FADV_WILLNEED
#undef POSIX_FADV_DONTNEED
#undef POSIX_FADV_NOREUSE
int posix_fadvise(int fd, off_t off, off_t len, int advice) __attribute__((unavailable("macOS has no posix_fadvise")));
int posix_fallocate(int fd, off_t off, off_t len) __attribute__((unavailable("macOS has no posix_fallocate")));
#define F_RDADVISE 44
#define F_NOCACHE 48
#define F_FULLFSYNC 51
struct radvisory {
    off_t ra_offset;
    int ra_count;
};
