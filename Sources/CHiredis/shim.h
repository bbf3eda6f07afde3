#ifndef ROUNDUP_CHIREDIS_SHIM_H
#define ROUNDUP_CHIREDIS_SHIM_H
// Only hiredis's RESP reader is used: the network side is SwiftNIO (with NIOSSL for rediss://),
// because Debian's hiredis 0.14 has no TLS. The reader is non-blocking: it parses bytes it is fed.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#endif
