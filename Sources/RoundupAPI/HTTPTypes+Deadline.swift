import NIOCore
public import NIOHTTPTypes
import RoundupCore
public import RoundupRuntime

// Hummingbird's channel carries the HTTP-types parts; the deadline handler only needs to know where a part stands.
extension HTTPRequestPart: HTTPDeadlineInbound {
    public var deadlinePhase: HTTPMessagePhase {
        switch self {
        case .head: .head
        case .body: .body
        case .end: .end
        }
    }
}

extension HTTPResponsePart: HTTPDeadlineOutbound {
    public var endsMessage: Bool {
        if case .end = self { return true }
        return false
    }
}

/// Long answers go out in pieces: the write deadline (`ROUNDUP_HTTP_WRITE_TIMEOUT_SECONDS`) is measured per piece, so a
/// slow client that keeps taking bytes is never closed for the size of one write.
enum ResponsePieces {
    /// The most one write holds.
    static let size = 64 * 1024

    /// `buffer` cut into pieces of at most `size` bytes (views of its storage, no copy).
    static func split(_ buffer: ByteBuffer) -> [ByteBuffer] {
        guard buffer.readableBytes > size else { return [buffer] }
        var rest = buffer
        var pieces: [ByteBuffer] = []
        while rest.readableBytes > 0, let piece = rest.readSlice(length: min(size, rest.readableBytes)) { pieces.append(piece) }
        return pieces
    }
}
