// The string and memory functions the init's objects call, and those the compiler emits calls
// to for struct copies and zeroing. Plain byte loops: the init copies little. no_builtin keeps
// the compiler from turning a loop back into a call to the function it is in.
#include <stddef.h>
#include <string.h>

#define XSB_NO_BUILTIN __attribute__((no_builtin))

XSB_NO_BUILTIN void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--) *d++ = *s++;
    return dst;
}

XSB_NO_BUILTIN void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d < s) {
        while (n--) *d++ = *s++;
    } else {
        while (n--) d[n] = s[n];
    }
    return dst;
}

XSB_NO_BUILTIN void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

XSB_NO_BUILTIN int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (; n; n--, x++, y++) {
        if (*x != *y) return *x - *y;
    }
    return 0;
}

XSB_NO_BUILTIN void *memchr(const void *p, int c, size_t n) {
    const unsigned char *s = p;
    for (; n; n--, s++) {
        if (*s == (unsigned char)c) return (void *)s;
    }
    return NULL;
}

XSB_NO_BUILTIN size_t strlen(const char *s) {
    const char *e = s;
    while (*e) e++;
    return (size_t)(e - s);
}
