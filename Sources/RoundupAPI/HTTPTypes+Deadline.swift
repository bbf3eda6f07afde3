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
