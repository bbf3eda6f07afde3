import Foundation
public import Hummingbird
public import NIOCore

/// The request context: Hummingbird's core, the body limit the API promises (1 MiB), the peer's address (the
/// throttle of failed authentication counts by it), and the account once `AuthenticationMiddleware` has found it.
public struct APIRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connected peer, as the socket tells it (a proxy in front shows as itself).
    public let remoteAddress: SocketAddress?
    /// The account whose bearer token the request carries (`AuthenticationMiddleware`); nil before it, and on the
    /// routes that need no token.
    public internal(set) var account: String?
    /// How the account was found (`AuthenticationMiddleware`): what a long response (a change stream) checks again to
    /// end when the token is revoked.
    var credential: Credential?
    /// Completes when the request's connection closes, however it closes (nil in router tests without a socket): what a
    /// response holds for its connection is given back here even when its body never runs.
    let connectionClosed: EventLoopFuture<Void>?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
        self.connectionClosed = source.channel.closeFuture
    }

    public var maxUploadSize: Int { 1 << 20 }

    /// Typed bodies as the API writes them (`APIResponseEncoder`).
    public var responseEncoder: APIResponseEncoder { APIResponseEncoder() }
}

/// The bearer token a request was authenticated with: its SHA-256 and the account's token epoch it was valid at
/// (`TokenCache`), nil when Redis could not say.
struct Credential: Sendable {
    var tokenHash: String
    var epoch: Int?
}

/// Response bodies as the API has always written them: JSON with sorted keys and unescaped slashes, sent as
/// `application/json` (Hummingbird's own JSON encoder adds `; charset=utf-8`).
public struct APIResponseEncoder: ResponseEncoder {
    public init() {}

    public func encode(_ value: some Encodable, from request: Request, context: some RequestContext) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(value)
        var buffer = ByteBuffer()
        buffer.writeBytes(data)
        return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: buffer))
    }
}
