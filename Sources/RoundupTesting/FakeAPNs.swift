import Crypto
import Foundation
public import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import RoundupCore

/// A stand-in for api.push.apple.com, as faithful as the tests need: HTTP/2 over TLS with ALPN `h2` (a CA made with
/// openssl for the occasion), `POST /3/device/{token}`, the provider token checked like APNs does (ES256 signature
/// against the key's public half, `kid`, `iss`, an `iat` under an hour old), the headers checked (`apns-topic`,
/// `apns-push-type`, priority 5 for background), payloads over 4096 bytes refused, `apns-id` echoed, and chosen
/// errors per device token. It can send GOAWAY in the middle of a burst. Several apps: `addApp` registers another
/// team's key and topic; a token is checked against the key its `kid` names and that key's team, and a topic must be
/// one of that team's (`TopicDisallowed` otherwise), as APNs checks them.
public final class FakeAPNs: Sendable {
    public struct Received: Sendable {
        public var deviceToken: String
        public var headers: [String: String]
        public var payload: String
        public var apnsID: String
        /// The provider token's `iat`.
        public var issuedAt: Int
        public var token: String
        public var connection: Int
        /// The provider token's `kid`, and the topic.
        public var keyID: String = ""
        public var topic: String { headers["apns-topic"] ?? "" }
    }

    /// One developer team's signing key and the topics (bundle ids) of its apps.
    public struct App: Sendable {
        public var topic: String
        public var teamID: String
        public var keyID: String
        /// The key as a `.p8` file, for the pusher.
        public var keyFile: String
        let publicKey: P256.Signing.PublicKey
    }

    public struct Failure: Sendable {
        public var status: Int
        public var reason: String
        /// How many more times to answer so (nil: always).
        public var remaining: Int?
        public init(status: Int, reason: String, remaining: Int? = nil) {
            self.status = status
            self.reason = reason
            self.remaining = remaining
        }
    }

    public struct State: Sendable {
        /// Pushes answered 200.
        public var delivered: [Received] = []
        /// Every request that reached a handler, with the status it got.
        public var answered: [(token: String, status: Int, reason: String?)] = []
        public var failures: [String: Failure] = [:]
        /// Provider tokens issued before this (seconds since 1970) are answered `ExpiredProviderToken`.
        public var expiredBefore: Int?
        /// The connection whose Nth request arrives answers it and the ones before, sends GOAWAY and drops the rest.
        public var goAwayAfter: Int?
        /// The next this-many requests are never answered (their streams stay open): the client's timeout must fire.
        public var stallNext = 0
        public var stalled = 0
        public var goAwaysSent = 0
        public var connections = 0
        /// Record payloads (off for benchmarks).
        public var record = true
        public var verifiedTokens: Set<String> = []
        /// Apps added beside the first (`addApp`), by key id.
        public var apps: [String: App] = [:]
    }

    public let state = NIOLockedValueBox(State())
    public let port: Int
    public let caFile: String
    public let keyFile: String
    public let keyID = "ABC123DEFG"
    public let teamID = "DEF123GHIJ"
    public let topic: String
    public var url: String { "https://127.0.0.1:\(port)" }
    let publicKey: P256.Signing.PublicKey
    private let channel: any Channel

    private init(channel: any Channel, port: Int, caFile: String, keyFile: String, topic: String, publicKey: P256.Signing.PublicKey) {
        self.channel = channel
        self.port = port
        self.caFile = caFile
        self.keyFile = keyFile
        self.topic = topic
        self.publicKey = publicKey
    }

    public static func start(topic: String = "app.dailyroundup.ios", maxConcurrentStreams: Int = 1000, port: Int = 0) async throws -> FakeAPNs {
        let dir = try TestSupport.temporaryDirectory("apns")
        try TestSupport.makeTestCertificates(in: dir, name: "roundup-test-apns")

        // The provider's signing key, as a .p8 file (PKCS#8 PEM) the pusher reads.
        let key = P256.Signing.PrivateKey()
        let keyFile = dir.appendingPathComponent("AuthKey.p8").path
        try key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)

        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(dir.appendingPathComponent("server.crt").path).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: dir.appendingPathComponent("server.key").path, format: .pem)))
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        var settings = NIOHTTP2Handler.ConnectionConfiguration()
        settings.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
        ]
        let box = NIOLockedValueBox<FakeAPNs?>(nil)
        let connectionSettings = settings
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let fake = box.withLockedValue({ $0 }) else { throw StackError("fake APNs not ready") }
                    let number = fake.state.withLockedValue { state -> Int in
                        state.connections += 1
                        return state.connections
                    }
                    let shared = ConnectionState(number: number)
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .server, connectionConfiguration: connectionSettings, streamConfiguration: .init()
                    ) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandler(FakeAPNsStreamHandler(fake: fake, connection: shared))
                        }
                    }
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        let fake = FakeAPNs(
            channel: channel, port: channel.localAddress?.port ?? 0, caFile: dir.appendingPathComponent("ca.crt").path, keyFile: keyFile,
            topic: topic, publicKey: key.publicKey)
        box.withLockedValue { $0 = fake }
        return fake
    }

    public func stop() async {
        try? await channel.close()
    }

    public var delivered: [Received] { state.withLockedValue { $0.delivered } }

    /// Registers another app: a team and key of its own (written as a `.p8` beside the first) and its topic.
    public func addApp(topic: String, teamID: String, keyID: String) throws -> App {
        let key = P256.Signing.PrivateKey()
        let file = URL(fileURLWithPath: keyFile).deletingLastPathComponent().appendingPathComponent("AuthKey_\(keyID).p8").path
        try key.pemRepresentation.write(toFile: file, atomically: true, encoding: .utf8)
        let app = App(topic: topic, teamID: teamID, keyID: keyID, keyFile: file, publicKey: key.publicKey)
        state.withLockedValue { $0.apps[keyID] = app }
        return app
    }

    /// The first app, started with the fake.
    public var firstApp: App { App(topic: topic, teamID: teamID, keyID: keyID, keyFile: keyFile, publicKey: publicKey) }

    public func fail(token: String, status: Int, reason: String, times: Int? = nil) {
        state.withLockedValue { $0.failures[token] = Failure(status: status, reason: reason, remaining: times) }
    }

    /// A provider token the fake accepts (for h2load in benchmarks).
    public func validProviderToken() throws -> String {
        let pem = try String(contentsOfFile: keyFile, encoding: .utf8)
        return Self.jwt(key: try P256.Signing.PrivateKey(pemRepresentation: pem), keyID: keyID, teamID: teamID, issuedAt: Date())
    }

    static func jwt(key: P256.Signing.PrivateKey, keyID: String, teamID: String, issuedAt: Date) -> String {
        func b64(_ bytes: some Sequence<UInt8>) -> String {
            Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
                of: "=", with: "")
        }
        let input =
            b64(Array(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8)) + "."
            + b64(Array(#"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#.utf8))
        return input + "." + b64((try? key.signature(for: Array(input.utf8)))?.rawRepresentation ?? Data())
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s)
    }

    /// Checks the provider token as APNs does; returns its `iat` and the app of its key, or the 403 reason.
    func verify(_ authorization: String?) -> Result<(iat: Int, app: App), FakeAPNsRefusal> {
        guard let authorization, authorization.lowercased().hasPrefix("bearer ") else {
            return .failure(.init(status: 403, reason: "MissingProviderToken"))
        }
        let jwt = String(authorization.dropFirst(7))
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Self.base64URLDecode(parts[0]), let claimsData = Self.base64URLDecode(parts[1]),
            let header = try? JSONParser.parse(Array(headerData)), let claims = try? JSONParser.parse(Array(claimsData)),
            header["alg"] == .string("ES256"), let kid = header["kid"]?.stringValue,
            let app = kid == keyID ? firstApp : state.withLockedValue({ $0.apps[kid] }), claims["iss"] == .string(app.teamID),
            case .number(let iatNumber)? = claims["iat"]
        else { return .failure(.init(status: 403, reason: "InvalidProviderToken")) }
        let iat = Int(iatNumber)
        let known = state.withLockedValue { $0.verifiedTokens.contains(jwt) }
        if !known {
            guard let signatureData = Self.base64URLDecode(parts[2]),
                let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
                app.publicKey.isValidSignature(signature, for: Array("\(parts[0]).\(parts[1])".utf8))
            else { return .failure(.init(status: 403, reason: "InvalidProviderToken")) }
            state.withLockedValue { _ = $0.verifiedTokens.insert(jwt) }
        }
        let expiredBefore = state.withLockedValue { $0.expiredBefore }
        if let expiredBefore, iat < expiredBefore { return .failure(.init(status: 403, reason: "ExpiredProviderToken")) }
        if Int(Date().timeIntervalSince1970) - iat > 3600 { return .failure(.init(status: 403, reason: "ExpiredProviderToken")) }
        return .success((iat, app))
    }
}

struct FakeAPNsRefusal: Error {
    var status: Int
    var reason: String
}

/// What the streams of one connection share (touched only on that connection's event loop).
final class ConnectionState: @unchecked Sendable {
    let number: Int
    var requests = 0
    var goAwayLastStream: Int?
    init(number: Int) { self.number = number }
}

final class FakeAPNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    let fake: FakeAPNs
    let connection: ConnectionState
    var headers = HPACKHeaders()
    var body = ByteBuffer()

    init(fake: FakeAPNs, connection: ConnectionState) {
        self.fake = fake
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let block):
            headers.add(contentsOf: block.headers)
            if block.endStream { respond(context: context) }
        case .data(let block):
            if case .byteBuffer(var bytes) = block.data { body.writeBuffer(&bytes) }
            if block.endStream { respond(context: context) }
        default:
            break
        }
    }

    private func respond(context: ChannelHandlerContext) {
        let streamID = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)).map { Int($0) } ?? 0
        if let last = connection.goAwayLastStream, streamID > last {
            return  // after our GOAWAY: not processed, never answered (the client sees it refused)
        }
        connection.requests += 1
        let stall = fake.state.withLockedValue { state -> Bool in
            guard state.stallNext > 0 else { return false }
            state.stallNext -= 1
            state.stalled += 1
            return true
        }
        if stall { return }
        let goAwayNow = fake.state.withLockedValue { state -> Bool in
            guard let after = state.goAwayAfter, connection.requests >= after else { return false }
            state.goAwayAfter = nil
            state.goAwaysSent += 1
            return true
        }
        let (status, reason, apnsID) = decide()
        var response = HPACKHeaders()
        response.add(name: ":status", value: String(status))
        response.add(name: "apns-id", value: apnsID)
        if let reason {
            response.add(name: "content-type", value: "application/json")
            context.write(wrapOutboundOut(.headers(.init(headers: response, endStream: false))), promise: nil)
            var json = #"{"reason":"\#(reason)""#
            if status == 410 { json += #","timestamp":\#(Int(Date().timeIntervalSince1970 * 1000))"# }
            json += "}"
            context.writeAndFlush(wrapOutboundOut(.data(.init(data: .byteBuffer(ByteBuffer(string: json)), endStream: true))), promise: nil)
        } else {
            context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: response, endStream: true))), promise: nil)
        }
        if goAwayNow, let parent = context.channel.parent {
            connection.goAwayLastStream = streamID
            let frame = HTTP2Frame(
                streamID: .rootStream, payload: .goAway(lastStreamID: HTTP2StreamID(streamID), errorCode: .noError, opaqueData: nil))
            parent.writeAndFlush(frame, promise: nil)
            parent.eventLoop.scheduleTask(in: .milliseconds(300)) { parent.close(promise: nil) }
        }
    }

    private func decide() -> (Int, String?, String) {
        let apnsID = headers.first(name: "apns-id") ?? UUID().uuidString.lowercased()
        let path = headers.first(name: ":path") ?? ""
        guard headers.first(name: ":method") == "POST", path.hasPrefix("/3/device/") else { return record(404, "BadPath", apnsID, token: "") }
        let token = String(path.dropFirst("/3/device/".count))
        let iat: Int
        let app: FakeAPNs.App
        switch fake.verify(headers.first(name: "authorization")) {
        case .failure(let refusal): return record(refusal.status, refusal.reason, apnsID, token: token)
        case .success(let value): (iat, app) = value
        }
        guard let topic = headers.first(name: "apns-topic") else { return record(400, "MissingTopic", apnsID, token: token) }
        // A token signs for its team's apps only.
        guard topic == app.topic else { return record(400, "TopicDisallowed", apnsID, token: token) }
        let type = headers.first(name: "apns-push-type")
        guard type == "background" || type == "alert" else { return record(400, "InvalidPushType", apnsID, token: token) }
        let priority = headers.first(name: "apns-priority") ?? "10"
        if type == "background", priority != "5" { return record(400, "BadPriority", apnsID, token: token) }
        guard body.readableBytes <= 4096 else { return record(413, "PayloadTooLarge", apnsID, token: token) }
        guard token.count >= 32, token.allSatisfy(\.isHexDigit) else { return record(400, "BadDeviceToken", apnsID, token: token) }
        let failure = fake.state.withLockedValue { state -> FakeAPNs.Failure? in
            guard var failure = state.failures[token] else { return nil }
            if let remaining = failure.remaining {
                if remaining <= 0 {
                    state.failures[token] = nil
                    return nil
                }
                failure.remaining = remaining - 1
                state.failures[token] = failure
            }
            return failure
        }
        if let failure { return record(failure.status, failure.reason, apnsID, token: token) }
        let payload = body.getString(at: body.readerIndex, length: body.readableBytes) ?? ""
        let bearer = String((headers.first(name: "authorization") ?? "").dropFirst(7))
        var names: [String: String] = [:]
        for (name, value, _) in headers { names[name] = value }
        fake.state.withLockedValue { state in
            state.answered.append((token, 200, nil))
            if state.record {
                state.delivered.append(
                    FakeAPNs.Received(
                        deviceToken: token, headers: names, payload: payload, apnsID: apnsID, issuedAt: iat, token: bearer,
                        connection: connection.number, keyID: app.keyID))
            }
        }
        return (200, nil, apnsID)
    }

    private func record(_ status: Int, _ reason: String, _ apnsID: String, token: String) -> (Int, String?, String) {
        fake.state.withLockedValue { $0.answered.append((token, status, reason)) }
        return (status, reason, apnsID)
    }
}
