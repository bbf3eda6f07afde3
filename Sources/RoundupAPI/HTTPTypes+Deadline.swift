import NIOCore
public import NIOHTTPTypes
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
    /// The most one piece holds.
    static let size = 64 * 1024
    /// A body up to this size goes out as one write (a typical page of changes among them: writing it in
    /// pieces cost the changes page more instructions). A client must take this much within the write timeout.
    static let wholeUpTo = 256 * 1024

    /// `buffer` cut into pieces of at most `size` bytes (views of its storage, no copy), or whole up to `wholeUpTo`.
    static func split(_ buffer: ByteBuffer) -> [ByteBuffer] {
        guard buffer.readableBytes > wholeUpTo else { return [buffer] }
        var rest = buffer
        var pieces: [ByteBuffer] = []
        while rest.readableBytes > 0, let piece = rest.readSlice(length: min(size, rest.readableBytes)) { pieces.append(piece) }
        return pieces
    }
}
