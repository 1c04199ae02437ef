/* tests/macos/sys/sysctl.h — for the macOS syntax check
 * (tests/check_macos.py): sysctlbyname as Apple's <sys/sysctl.h> declares
 * it. Not a build header. */
#ifndef SHIM_SYS_SYSCTL_H
#define SHIM_SYS_SYSCTL_H
#include <stddef.h>
int sysctlbyname(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
#endif
