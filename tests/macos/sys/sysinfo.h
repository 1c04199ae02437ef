/* tests/macos/sys/sysinfo.h — for the macOS syntax check (tests/check_macos.py):
 * macOS has no such header, so code that reaches it outside a Linux guard
 * fails the check. */
#error "<sys/sysinfo.h> does not exist on macOS"
