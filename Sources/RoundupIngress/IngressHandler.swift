import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis

/// What the handler needs, shared by every connection.
struct IngressContext: Sendable {
    var redis: RedisClient
    var keys: RedisKeys
    var directory: SecretDirectory
    var publicURL: String
    var dedupeTTLSeconds: Int
    var redisTimeout: TimeAmount
    var answerDeadline: TimeAmount
    var metrics: IngressMetrics
    var metricsText: @Sendable () -> String
    var logger: Logger
}

/// The webhook receiver, as a plain SwiftNIO HTTP/1 handler: no per-request task, every step a future
/// on the connection's event loop. One request at a time per connection (NIO's pipelining helper).
final class IngressHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let maxBody = 1 << 20
    static let webhookPath = "/dailyroundup/webhook/trello"

    private let shared: IngressContext
    private var head: HTTPRequestHead?
    private var body: ByteBuffer?
    private var discarding = false
    private var started = NIODeadline.now()
    /// Set when the answer for the current request has been written (by the result or the deadline).
    private var answered = true
    /// Counts requests on this connection: a late result of an earlier request (after its 503) must not answer a later one.
    private var generation: UInt64 = 0

    init(context: IngressContext) { self.shared = context }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            self.body = nil
            self.discarding = false
            self.answered = false
            self.started = .now()
            self.generation &+= 1
            if head.method == .POST, let length = head.headers.first(name: "content-length").flatMap(Int.init), length > Self.maxBody {
                discarding = true
                respondError(context: context, .payloadTooLarge, "payload_too_large", "body is over 1 MiB", close: true)
            }
        case .body(var chunk):
            guard !discarding else { return }
            if body == nil {
                body = chunk
            } else {
                body!.writeBuffer(&chunk)
            }
            if body!.readableBytes > Self.maxBody {
                discarding = true
                body = nil
                respondError(context: context, .payloadTooLarge, "payload_too_large", "body is over 1 MiB", close: true)
            }
        case .end:
            guard let head, !discarding else { return }
            self.head = nil
            route(context: context, head: head, body: body ?? ByteBuffer())
            body = nil
        }
    }

    private func route(context: ChannelHandlerContext, head: HTTPRequestHead, body: ByteBuffer) {
        let uri = head.uri
        let path = uri.firstIndex(of: "?").map { String(uri[..<$0]) } ?? uri
        if path == "/healthz", head.method == .GET || head.method == .HEAD {
            return respond(context: context, .ok, json: #"{"status":"ok"}"#)
        }
        if path == "/readyz", head.method == .GET {
            // Ready when Redis answers: the ingress needs nothing else.
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            shared.redis.send(RedisCommand("PING"), timeout: shared.redisTimeout, on: context.eventLoop)
                .hop(to: context.eventLoop)
                .whenComplete { result in
                    let (this, context) = loopBound.value
                    if case .success = result {
                        this.respond(context: context, .ok, json: #"{"status":"ready"}"#)
                    } else {
                        this.respondError(context: context, .serviceUnavailable, "unavailable", "Redis is not reachable")
                    }
                }
            return
        }
        if path == "/metrics", head.method == .GET {
            return respond(context: context, .ok, body: ByteBuffer(string: shared.metricsText()), contentType: "text/plain; version=0.0.4")
        }
        let account: String?
        if path == Self.webhookPath || path == Self.webhookPath + "/" {
            account = nil
        } else if path.hasPrefix(Self.webhookPath + "/") {
            let rest = path.dropFirst(Self.webhookPath.count + 1)
            guard !rest.isEmpty, !rest.contains("/") else {
                return respondError(context: context, .notFound, "not_found", "no such path")
            }
            account = String(rest)
        } else {
            return respondError(context: context, .notFound, "not_found", "no such path")
        }
        switch head.method {
        case .HEAD:
            // Trello checks a callback URL with HEAD before it creates a webhook.
            return respond(context: context, .ok, body: nil)
        case .POST:
            receive(context: context, head: head, account: account, body: body)
        default:
            var headers = HTTPHeaders()
            headers.add(name: "allow", value: "HEAD, POST")
            respondError(context: context, .methodNotAllowed, "method_not_allowed", "use POST (or HEAD)", extra: headers)
        }
    }

    private func receive(context: ChannelHandlerContext, head: HTTPRequestHead, account: String?, body: ByteBuffer) {
        let envelope: JSONParser.Envelope
        do {
            envelope = try body.withUnsafeReadableBytes { raw in
                // JSON is UTF-8: a body that is not, is not a webhook (and is never passed on to the worker).
                guard String(validating: raw, as: UTF8.self) != nil else { throw JSONParser.Error(offset: 0, reason: "not UTF-8") }
                return try JSONParser.envelope(raw)
            }
        } catch {
            shared.metrics.malformed.increment()
            return respondError(context: context, .badRequest, "invalid_json", "body is not a JSON webhook")
        }
        guard envelope.hasAction else {
            shared.metrics.malformed.increment()
            return respondError(context: context, .badRequest, "missing_action", "body has no action")
        }
        guard let signature = head.headers.first(name: "x-trello-webhook"), !signature.isEmpty else {
            shared.metrics.badSignature.increment()
            return respondError(context: context, .unauthorized, "missing_signature", "X-Trello-Webhook header is missing")
        }
        let callbackURL = shared.publicURL + head.uri
        let eventLoop = context.eventLoop
        let loopBound = NIOLoopBound((self, context), eventLoop: eventLoop)
        let generation = self.generation

        // Answer 503 if Redis has not answered in time, so Trello retries; a late success is then a duplicate.
        // The connection is closed with it, so nothing late can be mistaken for the answer to a next request.
        let deadline = eventLoop.scheduleTask(in: shared.answerDeadline) {
            let (this, context) = loopBound.value
            guard !this.answered, this.generation == generation else { return }
            this.shared.metrics.redisErrors.increment()
            this.shared.metrics.unavailable.increment()
            this.respondError(context: context, .serviceUnavailable, "unavailable", "queue unavailable, retry later", close: true)
        }

        let verified: EventLoopFuture<String?>
        let shared = self.shared
        let timeout = shared.redisTimeout
        if let account {
            verified = shared.directory.secret(account: account, on: eventLoop, timeout: timeout).flatMapThrowing { secret in
                guard let secret else { throw IngressRejection.unknownAccount }
                let valid = body.withUnsafeReadableBytes {
                    TrelloSignature.verify(header: signature, secret: secret, body: $0, callbackURL: callbackURL)
                }
                return valid ? account : nil
            }
        } else {
            guard let model = envelope.modelID, !model.isEmpty else {
                deadline.cancel()
                return respondError(context: context, .badRequest, "missing_model", "body has no model.id to route by")
            }
            verified = shared.directory.accounts(watching: model, on: eventLoop, timeout: timeout).flatMap { accounts in
                guard !accounts.isEmpty else { return eventLoop.makeFailedFuture(IngressRejection.unknownAccount) }
                let secrets = accounts.map { shared.directory.secret(account: $0, on: eventLoop, timeout: timeout) }
                return EventLoopFuture.whenAllSucceed(secrets, on: eventLoop).map { secrets in
                    for (account, secret) in zip(accounts, secrets) {
                        if let secret, body.withUnsafeReadableBytes({
                            TrelloSignature.verify(header: signature, secret: secret, body: $0, callbackURL: callbackURL)
                        }) {
                            return account
                        }
                    }
                    return nil
                }
            }
        }

        verified.flatMap { account -> EventLoopFuture<Outcome> in
            guard let account else { return eventLoop.makeSucceededFuture(.badSignature) }
            guard let type = envelope.actionType, TrelloActionType.handled.contains(type) else {
                return eventLoop.makeSucceededFuture(.ignored)
            }
            guard let actionID = envelope.actionID, !actionID.isEmpty else { return eventLoop.makeSucceededFuture(.noActionID) }
            let fields: [RedisArgument] = [
                RedisArgument(shared.dedupeTTLSeconds),
                "account", RedisArgument(account),
                "action", RedisArgument(actionID),
                "type", RedisArgument(type),
                "model", RedisArgument(envelope.modelID ?? ""),
                "received", RedisArgument(Int(Date().timeIntervalSince1970 * 1000)),
                "body", RedisArgument(buffer: body),
            ]
            return shared.redis.evaluate(
                IngressScripts.enqueue,
                keys: [RedisArgument(shared.keys.seenAction(account: account, action: actionID)), RedisArgument(shared.keys.webhookStream)],
                arguments: fields, timeout: timeout, on: eventLoop
            ).hop(to: eventLoop).map { reply in reply.isNull ? .duplicate : .enqueued }
        }.whenComplete { result in
            deadline.cancel()
            let (this, context) = loopBound.value
            guard !this.answered, this.generation == generation else { return }
            switch result {
            case .success(.enqueued):
                this.shared.metrics.accepted.increment()
                this.shared.metrics.enqueueDuration.recordNanoseconds((NIODeadline.now() - this.started).nanoseconds)
                this.respond(context: context, .ok, json: #"{"status":"accepted"}"#)
            case .success(.duplicate):
                this.shared.metrics.duplicates.increment()
                this.respond(context: context, .ok, json: #"{"status":"duplicate"}"#)
            case .success(.ignored):
                this.shared.metrics.ignored.increment()
                this.respond(context: context, .ok, json: #"{"status":"ignored"}"#)
            case .success(.badSignature):
                this.shared.metrics.badSignature.increment()
                this.respondError(context: context, .unauthorized, "bad_signature", "X-Trello-Webhook does not match the body and callback URL")
            case .success(.noActionID):
                this.shared.metrics.malformed.increment()
                this.respondError(context: context, .badRequest, "missing_action_id", "action has no id")
            case .failure(IngressRejection.unknownAccount):
                this.shared.metrics.unknownAccount.increment()
                this.respondError(context: context, .notFound, "unknown_account", "no account receives webhooks here")
            case .failure(let error):
                this.shared.metrics.redisErrors.increment()
                this.shared.metrics.unavailable.increment()
                this.shared.logger.warning("enqueue failed", metadata: ["error": "\(error)"])
                this.respondError(context: context, .serviceUnavailable, "unavailable", "queue unavailable, retry later")
            }
        }
    }

    private enum Outcome {
        case enqueued, duplicate, ignored, badSignature, noActionID
    }

    private enum IngressRejection: Error {
        case unknownAccount
    }

    // MARK: Responses

    private func respondError(
        context: ChannelHandlerContext, _ status: HTTPResponseStatus, _ code: String, _ message: String,
        close: Bool = false, extra: HTTPHeaders = [:]
    ) {
        respond(context: context, status, json: #"{"error":{"code":""# + code + #"","message":""# + message + #""}}"#, close: close, extra: extra)
    }

    private func respond(context: ChannelHandlerContext, _ status: HTTPResponseStatus, json: String, close: Bool = false, extra: HTTPHeaders = [:]) {
        respond(context: context, status, body: ByteBuffer(string: json), contentType: "application/json", close: close, extra: extra)
    }

    private func respond(
        context: ChannelHandlerContext, _ status: HTTPResponseStatus, body: ByteBuffer?, contentType: String? = nil,
        close: Bool = false, extra: HTTPHeaders = [:]
    ) {
        guard !answered else { return }
        answered = true
        shared.metrics.record(status: status, since: started)
        var headers = extra
        if let contentType { headers.add(name: "content-type", value: contentType) }
        headers.add(name: "content-length", value: String(body?.readableBytes ?? 0))
        if close { headers.add(name: "connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if let body, body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // One bad peer cannot stop the server: drop its connection only.
        context.close(promise: nil)
    }
}

/// Counters and timers, created once (handles are cached, not looked up per request).
struct IngressMetrics: Sendable {
    /// `roundup_webhooks_received_total{result}`: what became of each webhook POST.
    let accepted = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "accepted")])
    let duplicates = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "duplicate")])
    let ignored = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "ignored")])
    let badSignature = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "bad_signature")])
    let malformed = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "invalid")])
    let unavailable = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "unavailable")])
    let unknownAccount = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "unknown_account")])
    let redisErrors = Counter(label: "roundup_ingress_redis_errors_total")
    /// From the webhook's arrival to Redis's answer to the enqueue.
    let enqueueDuration = Timer(label: "roundup_ingress_enqueue_duration_seconds")
    let duration = Timer(label: "roundup_ingress_request_duration_seconds")
    private let byStatus: [Int: Counter] = Dictionary(
        uniqueKeysWithValues: [200, 400, 401, 404, 405, 413, 503].map {
            ($0, Counter(label: "roundup_ingress_requests_total", dimensions: [("status", String($0))]))
        })

    func record(status: HTTPResponseStatus, since start: NIODeadline) {
        byStatus[Int(status.code)]?.increment()
        duration.recordNanoseconds((NIODeadline.now() - start).nanoseconds)
    }
}
