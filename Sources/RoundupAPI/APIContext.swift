import Foundation
public import Hummingbird
public import NIOCore

/// The request context: Hummingbird's core, the body limit the API promises (1 MiB), the peer's address (the
/// throttle of failed authentication counts by it), and what `AuthenticationMiddleware` found. Routes that need an
/// account never read it from here: they run in `AuthenticatedContext`.
public struct APIRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connected peer, as the socket tells it (a proxy in front shows as itself).
    public let remoteAddress: SocketAddress?
    /// The account whose bearer token the request carries and how it was found (`AuthenticationMiddleware`); nil
    /// before it, and on the routes that need no token. Read only by `AuthenticatedContext.init`.
    var authenticated: (account: String, credential: Credential)?
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

/// The context of every route behind `AuthenticationMiddleware` (Hummingbird's `ChildRequestContext`): its account is
/// not optional. The route collections that need an account are `RouteCollection<AuthenticatedContext>`, which mount
/// only on a group of this context, and `API.authenticatedRoutes` is the one place that makes such a group: after the
/// middleware. A route mounted without authentication does not compile.
public struct AuthenticatedContext: ChildRequestContext, RemoteAddressRequestContext {
    public typealias ParentContext = APIRequestContext
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    /// The account whose bearer token the request carries.
    public let account: String
    /// How the account was found: what a long response (a change stream, an export) checks again to end when the
    /// token is revoked.
    let credential: Credential
    /// Completes when the request's connection closes (nil in router tests without a socket).
    let connectionClosed: EventLoopFuture<Void>?

    public init(context: APIRequestContext) throws {
        // Unreachable through `API.authenticatedRoutes`, whose middleware sets it or answers itself.
        guard let authenticated = context.authenticated else {
            throw APIError(.internalServerError, "internal", "the server failed; it is logged")
        }
        coreContext = context.coreContext
        remoteAddress = context.remoteAddress
        connectionClosed = context.connectionClosed
        account = authenticated.account
        credential = authenticated.credential
    }

    public var maxUploadSize: Int { 1 << 20 }

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
