import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import Tracing

/// What the handler needs, shared by every connection.
struct IngressContext: Sendable {
    var redis: RedisClient
    var keys: RedisKeys
    var directory: SecretDirectory
    var publicURL: String
    var dedupeTTLSeconds: Int
    /// Events waiting in the stream beyond which deliveries are answered 503; 0: no bound.
    var maxBacklog: Int
    /// One account's share of its shard.
    var shares: WebhookShares
    var redisTimeout: TimeAmount
    /// Replicas that must have an accepted event before it is answered 200 (nil: none).
    var replicas: RedisReplicaWait?
    var answerDeadline: TimeAmount
    var metrics: IngressMetrics
    var metricsText: @Sendable () -> String
    var logger: Logger
    /// Traces (`RoundupTracing`): nil when off, and then nothing of them runs.
    var tracer: (any Tracer)?
}

/// The webhook receiver, as a plain SwiftNIO HTTP/1 handler: no per-request task, every step a future
/// on the connection's event loop. One request at a time per connection (NIO's pipelining helper).
final class IngressHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let maxBody = 1 << 20
    static let webhookPath = "/dailyroundup/webhook/trello"
    static let webhookPrefix = webhookPath + "/"
    /// The webhook route as a trace names it (`http.route`).
    static let webhookRoute = webhookPath + "/{account}"

    private let shared: IngressContext
    private var route: Route?
    private var body: ByteBuffer?
    private var discarding = false
    private var started = NIODeadline.now()
    /// Set when the answer for the current request has been written (by the result or the deadline).
    private var answered = true
    /// Counts requests on this connection: a late result of an earlier request (after its 503) must not answer a later one.
    private var generation: UInt64 = 0
    /// The webhook delivery's server span (tracing on), ended with its answer.
    private var span: (any Span)?

    init(context: IngressContext) { self.shared = context }

    /// What a request head asks for, decided before its body is read.
    private enum Route {
        case health, ready, metrics
        /// `HEAD` on a webhook path: Trello's check of a callback URL.
        case callbackCheck
        /// A webhook delivery, for an account named in the path (with its callback token, or without on an older
        /// URL) or (nil) found from `model.id`.
        case webhook(account: String?, token: String?, head: HTTPRequestHead)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.route = nil
            self.body = nil
            self.discarding = false
            self.answered = false
            self.started = .now()
            self.generation &+= 1
            switch Self.route(head) {
            case .success(let route):
                self.route = route
                if case .webhook = route, let length = head.headers.first(name: "content-length").flatMap(Int.init), length > Self.maxBody {
                    discarding = true
                    respondError(context: context, .payloadTooLarge, "payload_too_large", "body is over 1 MiB", close: true)
                }
            case .failure(let rejection):
                // Answered from the head alone: the body is never read, and the connection is closed with it.
                discarding = true
                if rejection.status == .notFound, rejection.code == "unknown_account" { shared.metrics.unknownAccount.increment() }
                respondError(context: context, rejection.status, rejection.code, rejection.message, close: true, extra: rejection.headers)
            }
        case .body(var chunk):
            guard !discarding else { return }
            if var buffer = body {
                body = nil  // one owner of the storage while it grows
                buffer.writeBuffer(&chunk)
                body = buffer
            } else {
                body = chunk
            }
            if (body?.readableBytes ?? 0) > Self.maxBody {
                discarding = true
                body = nil
                respondError(context: context, .payloadTooLarge, "payload_too_large", "body is over 1 MiB", close: true)
            }
        case .end:
            guard let route, !discarding else { return }
            self.route = nil
            let body = self.body ?? ByteBuffer()
            self.body = nil
            handle(context: context, route: route, body: body)
        }
    }

    private struct Rejection: Error {
        var status: HTTPResponseStatus
        var code: String
        var message: String
        var headers: HTTPHeaders = [:]
    }

    /// Routes on the path and method alone. A path segment that is not an account id's shape is answered as an
    /// unknown account at once, before any lookup: nothing a client puts in the path becomes a cache entry or a key.
    private static func route(_ head: HTTPRequestHead) -> Result<Route, Rejection> {
        let uri = head.uri
        let path = uri.utf8.firstIndex(of: UInt8(ascii: "?")).map { uri[..<$0] } ?? uri[...]
        switch path {
        case "/healthz" where head.method == .GET || head.method == .HEAD: return .success(.health)
        case "/readyz" where head.method == .GET: return .success(.ready)
        case "/metrics" where head.method == .GET: return .success(.metrics)
        default: break
        }
        var account: String?
        var token: String?
        if path == webhookPath || path == webhookPrefix {
            account = nil
        } else if path.utf8.starts(with: webhookPrefix.utf8) {
            // ACCOUNT or ACCOUNT/TOKEN, neither empty.
            let rest = path.dropFirst(webhookPrefix.utf8.count)
            let slash = rest.utf8.firstIndex(of: UInt8(ascii: "/"))
            let first = slash.map { rest[..<$0] } ?? rest
            let second = slash.map { rest[rest.utf8.index(after: $0)...] }
            guard !first.isEmpty, second.map({ !$0.isEmpty && !$0.utf8.contains(UInt8(ascii: "/")) }) ?? true else {
                return .failure(Rejection(status: .notFound, code: "not_found", message: "no such path"))
            }
            // Shapes first: a path that cannot be an account's is answered without a lookup.
            guard IdentifierShape.isAccountID(first), second.map(WebhookCallback.isToken) ?? true else {
                return .failure(Rejection(status: .notFound, code: "unknown_account", message: "no account receives webhooks here"))
            }
            account = String(first)
            token = second.map(String.init)
        } else {
            return .failure(Rejection(status: .notFound, code: "not_found", message: "no such path"))
        }
        switch head.method {
        case .HEAD: return .success(.callbackCheck)
        case .POST: return .success(.webhook(account: account, token: token, head: head))
        default:
            var headers = HTTPHeaders()
            headers.add(name: "allow", value: "HEAD, POST")
            return .failure(Rejection(status: .methodNotAllowed, code: "method_not_allowed", message: "use POST (or HEAD)", headers: headers))
        }
    }

    private func handle(context: ChannelHandlerContext, route: Route, body: ByteBuffer) {
        switch route {
        case .health:
            respond(context: context, .ok, json: #"{"status":"ok"}"#)
        case .ready:
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
        case .metrics:
            respond(context: context, .ok, body: ByteBuffer(string: shared.metricsText()), contentType: "text/plain; version=0.0.4")
        case .callbackCheck:
            // Trello checks a callback URL with HEAD before it creates a webhook.
            respond(context: context, .ok, body: nil)
        case .webhook(let account, let token, let head):
            receive(context: context, head: head, account: account, token: token, body: body)
        }
    }

    private func receive(context: ChannelHandlerContext, head: HTTPRequestHead, account: String?, token: String?, body: ByteBuffer) {
        // Each delivery starts a trace (Trello sends no context): the server span, with the route, never the path (its
        // account id and callback token).
        if let tracer = shared.tracer {
            let span = tracer.startSpan("POST \(Self.webhookRoute)", context: .topLevel, ofKind: .server)
            span.attributes["http.request.method"] = "POST"
            span.attributes["http.route"] = Self.webhookRoute
            span.attributes["url.scheme"] = "http"
            span.attributes["http.request.body.size"] = body.readableBytes
            self.span = span
        }
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
        // Ids are checked for their shape before anything is looked up or stored (no NUL, no control characters,
        // nothing hundreds of KB long).
        if let bad = Self.badID(envelope) {
            shared.metrics.malformed.increment()
            return respondError(context: context, .badRequest, "invalid_id", "\(bad) is not a Trello id (1 to 64 letters, digits, - or _)")
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

        // What is answered, once: the enqueue's outcome or why there was none.
        let shared = self.shared
        let serverSpan = span?.context
        let finish: @Sendable (Result<Outcome, any Error>) -> Void = { result in
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
            case .success(.backlogFull):
                // Redis keeps room for the accounts already waiting; Trello retries this delivery later.
                this.shared.metrics.backlogFull.increment()
                this.respondRetryLater(context: context, "backlog_full", "too many events are waiting, retry later", after: 30)
            case .success(.accountFull):
                // This account holds its share of the shard; its neighbours are still accepted. Trello retries.
                this.shared.metrics.accountFull.increment()
                this.respondRetryLater(context: context, "account_backlog_full", "this account has too many events waiting, retry later", after: 30)
            case .success(.accountRate):
                this.shared.metrics.accountRate.increment()
                this.respondRetryLater(
                    context: context, "account_rate_limited", "this account sends events faster than its rate, retry later", after: 5)
            case .success(.noActionID):
                this.shared.metrics.malformed.increment()
                this.respondError(context: context, .badRequest, "missing_action_id", "action has no id")
            case .failure(IngressRejection.deletedAccount):
                this.shared.metrics.deletedAccount.increment()
                this.respondError(context: context, .gone, "account_deleted", "this account was deleted; remove the webhook")
            case .failure(let error as RedisClientError) where error.code == .notReplicated:
                // In the stream, not yet on a replica: a failover now could lose it, so Trello must send it again (its
                // redelivery finds the dedupe mark and waits for the replica the same way).
                this.shared.metrics.notReplicated.increment()
                this.respondRetryLater(context: context, "not_replicated", "accepted but not yet on a replica, retry later", after: 1)
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

        // Dedupe and enqueue in one script, once the delivery's account is known and its signature checks out;
        // `trusted`: it came to the account's own callback URL (token and all); one that did not is enqueued to be
        // confirmed against Trello (`WebhookCallback`). Redis's reply comes back to a callback on this loop, not
        // through a chain of futures (each one an allocation and several runtime metadata lookups).
        let timeout = shared.redisTimeout
        let enqueue: @Sendable (Result<(account: String, trusted: Bool)?, any Error>) -> Void = { verified in
            let account: String
            let trusted: Bool
            switch verified {
            case .failure(let error): return finish(.failure(error))
            case .success(nil): return finish(.success(.badSignature))
            case .success(let found?): (account, trusted) = found
            }
            guard let type = envelope.actionType, TrelloActionType.handled.contains(type) else { return finish(.success(.ignored)) }
            guard let actionID = envelope.actionID, !actionID.isEmpty else { return finish(.success(.noActionID)) }
            var fields: [RedisArgument] = []
            fields.reserveCapacity(16)
            fields.append(RedisArgument(shared.dedupeTTLSeconds))
            // The bound is the whole backlog's: each shard holds its share.
            fields.append(RedisArgument(shared.maxBacklog == 0 ? 0 : (shared.maxBacklog + WebhookShard.count - 1) / WebhookShard.count))
            fields.append(RedisArgument(shared.shares.accountEvents))
            fields.append(RedisArgument(shared.shares.accountBytes))
            fields.append(RedisArgument(shared.shares.shardBytes))
            fields.append(RedisArgument(shared.shares.accountRate))
            fields.append(RedisArgument(0))
            // `WebhookEvent`'s fields, in its order, without building one: this is the hot path.
            fields.append(RedisArgument(WebhookEvent.Field.account.rawValue))
            fields.append(RedisArgument(account))
            fields.append(RedisArgument(WebhookEvent.Field.action.rawValue))
            fields.append(RedisArgument(actionID))
            fields.append(RedisArgument(WebhookEvent.Field.type.rawValue))
            fields.append(RedisArgument(type))
            fields.append(RedisArgument(WebhookEvent.Field.model.rawValue))
            fields.append(RedisArgument(envelope.modelID ?? ""))
            fields.append(RedisArgument(WebhookEvent.Field.received.rawValue))
            fields.append(RedisArgument(Int(Date().timeIntervalSince1970 * 1000)))
            fields.append(RedisArgument(WebhookEvent.Field.body.rawValue))
            fields.append(RedisArgument(buffer: body))
            if !trusted {
                fields.append(RedisArgument(WebhookEvent.Field.confirm.rawValue))
                fields.append(RedisArgument(WebhookEvent.confirmed))
            }
            let shard = WebhookShard(account: account)
            // The producer span (tracing on): the entry carries its context, which the worker's batch links to.
            var producer: (any Span)?
            if let tracer = shared.tracer, let serverSpan {
                let span = tracer.startSpan("send webhooks", context: serverSpan, ofKind: .producer)
                span.attributes["messaging.system"] = "redis"
                span.attributes["messaging.operation.type"] = "send"
                span.attributes["messaging.operation.name"] = "XADD"
                span.attributes["messaging.destination.name"] = shared.keys.webhookStream(shard)
                span.attributes["roundup.trello.action.id"] = actionID
                span.attributes["roundup.trello.action.type"] = type
                if let headers = tracer.traceHeaders(of: span.context) {
                    fields.append(RedisArgument(TraceHeaders.Field.traceparent.rawValue))
                    fields.append(RedisArgument(headers.traceparent))
                    if let state = headers.tracestate {
                        fields.append(RedisArgument(TraceHeaders.Field.tracestate.rawValue))
                        fields.append(RedisArgument(state))
                    }
                }
                producer = span
            }
            let producerSpan = producer
            shared.redis.evaluate(
                IngressScripts.enqueue,
                keys: [
                    RedisArgument(shared.keys.seenAction(account: account, shard: shard, action: actionID)),
                    RedisArgument(shared.keys.webhookStream(shard)),
                    RedisArgument(shared.keys.webhookLoad(shard)),
                ],
                arguments: fields, timeout: timeout, replicas: shared.replicas, on: eventLoop
            ) { reply in
                if let producerSpan {
                    switch reply {
                    case .success(let value):
                        if let id = value.string { producerSpan.attributes["messaging.message.id"] = id }
                    case .failure(let error):
                        producerSpan.recordError(error)
                        producerSpan.setStatus(SpanStatus(code: .error))
                    }
                    producerSpan.end()
                }
                finish(
                    reply.map { reply in
                        switch reply.int.flatMap(IngressScripts.Refusal.init(rawValue:)) {
                        case .duplicate?: .duplicate
                        case .shardFull?: .backlogFull
                        case .accountFull?: .accountFull
                        case .accountRate?: .accountRate
                        case nil: .enqueued
                        }
                    })
            }
        }

        if let account {
            let check: @Sendable (SecretDirectory.AccountLookup) throws -> (account: String, trusted: Bool)? = { lookup in
                let keys: SecretDirectory.AccountKeys
                switch lookup {
                case .known(let known): keys = known
                case .deleted: throw IngressRejection.deletedAccount
                case .unknown: throw IngressRejection.unknownAccount
                }
                if let token {
                    // A wrong token is answered as an unknown account: nothing tells a prober which part was wrong.
                    guard let expected = keys.callbackToken, constantTimeEquals(Array(expected.utf8), Array(token.utf8)) else {
                        throw IngressRejection.unknownAccount
                    }
                }
                let valid = body.withUnsafeReadableBytes {
                    TrelloSignature.verify(header: signature, secret: keys.secret, body: $0, callbackURL: callbackURL)
                }
                return valid ? (account, token != nil) : nil
            }
            if let cached = shared.directory.cachedKeys(account: account) {
                enqueue(Result { try check(cached) })
            } else {
                shared.directory.keys(account: account, on: eventLoop, timeout: timeout).whenComplete { lookup in
                    enqueue(lookup.flatMap { lookup in Result { try check(lookup) } })
                }
            }
        } else {
            guard let model = envelope.modelID, !model.isEmpty else {
                deadline.cancel()
                return respondError(context: context, .badRequest, "missing_model", "body has no model.id to route by")
            }
            shared.directory.accounts(watching: model, on: eventLoop, timeout: timeout).flatMap { accounts in
                guard !accounts.isEmpty else { return eventLoop.makeFailedFuture(IngressRejection.unknownAccount) }
                let lookups = accounts.map { shared.directory.keys(account: $0, on: eventLoop, timeout: timeout) }
                return EventLoopFuture.whenAllSucceed(lookups, on: eventLoop).map { found -> (account: String, trusted: Bool)? in
                    for (account, lookup) in zip(accounts, found) {
                        if case .known(let keys) = lookup,
                            body.withUnsafeReadableBytes({
                                TrelloSignature.verify(header: signature, secret: keys.secret, body: $0, callbackURL: callbackURL)
                            })
                        {
                            return (account, false)
                        }
                    }
                    return nil
                }
            }.whenComplete(enqueue)
        }
    }

    private enum Outcome {
        case enqueued, duplicate, ignored, badSignature, noActionID, backlogFull, accountFull, accountRate
    }

    /// The first id of the envelope whose shape is wrong, named as the field it came from.
    private static func badID(_ envelope: JSONParser.Envelope) -> String? {
        if let id = envelope.actionID, !id.isEmpty, !IdentifierShape.isTrelloID(id) { return "action.id" }
        if let id = envelope.modelID, !IdentifierShape.isTrelloID(id) { return "model.id" }
        if envelope.dataIDs.contains(where: { !IdentifierShape.isTrelloID($0) }) { return "an id in action.data" }
        return nil
    }

    private enum IngressRejection: Error {
        case unknownAccount
        /// Deleted lately: answered 410, which makes Trello delete the webhook (one the account's revoked token could not).
        case deletedAccount
    }

    // MARK: Responses

    private func respondError(
        context: ChannelHandlerContext, _ status: HTTPResponseStatus, _ code: String, _ message: String,
        close: Bool = false, extra: HTTPHeaders = [:]
    ) {
        respond(context: context, status, json: #"{"error":{"code":""# + code + #"","message":""# + message + #""}}"#, close: close, extra: extra)
    }

    /// 503 with `Retry-After`: Trello sends the delivery again later.
    private func respondRetryLater(context: ChannelHandlerContext, _ code: String, _ message: String, after seconds: Int) {
        var headers = HTTPHeaders()
        headers.add(name: "retry-after", value: String(seconds))
        respondError(context: context, .serviceUnavailable, code, message, extra: headers)
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
        if let span {
            span.attributes["http.response.status_code"] = Int(status.code)
            if status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
            span.end()
            self.span = nil
        }
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
        // A request NIO's decoder refused (headers over the limit, broken framing) gets its JSON answer; then, as for
        // any other error, only this peer's connection is dropped: one bad peer cannot stop the server.
        if let parse = error as? HTTPParserError, context.channel.isActive {
            discarding = true
            answered = false
            if case .headerOverflow = parse {
                respondError(context: context, .init(statusCode: 431), "headers_too_large", "request headers are over the limit", close: true)
            } else {
                respondError(context: context, .badRequest, "bad_request", "not a valid HTTP/1.1 request", close: true)
            }
            return
        }
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
    let backlogFull = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "backlog_full")])
    let accountFull = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "account_backlog_full")])
    let accountRate = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "account_rate_limited")])
    let notReplicated = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "not_replicated")])
    let deletedAccount = Counter(label: "roundup_webhooks_received_total", dimensions: [("result", "account_deleted")])
    let redisErrors = Counter(label: "roundup_ingress_redis_errors_total")
    /// From the webhook's arrival to Redis's answer to the enqueue.
    let enqueueDuration = Timer(label: "roundup_ingress_enqueue_duration_seconds")
    let duration = Timer(label: "roundup_ingress_request_duration_seconds")
    private let byStatus: [Int: Counter] = Dictionary(
        uniqueKeysWithValues: [200, 400, 401, 404, 405, 410, 413, 431, 503].map {
            ($0, Counter(label: "roundup_ingress_requests_total", dimensions: [("status", String($0))]))
        })

    func record(status: HTTPResponseStatus, since start: NIODeadline) {
        byStatus[Int(status.code)]?.increment()
        duration.recordNanoseconds((NIODeadline.now() - start).nanoseconds)
    }
}
