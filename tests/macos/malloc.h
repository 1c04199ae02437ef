/* tests/macos/malloc.h — for the macOS syntax check (tests/check_macos.py):
 * macOS has no such header, so code that reaches it outside a Linux guard
 * fails the check. */
#error "<malloc.h> does not exist on macOS"
