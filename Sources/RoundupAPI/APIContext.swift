import Hummingbird
import NIOCore

/// The request context: Hummingbird's core, the body limit the API promises (1 MiB), and the peer's address (the
/// throttle of failed authentication counts by it).
public struct APIRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connected peer, as the socket tells it (a proxy in front shows as itself).
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    public var maxUploadSize: Int { 1 << 20 }
}
