public import AsyncHTTPClient
import Foundation
public import Logging
import Metrics
public import NIOCore
public import NIOHTTP1
public import RoundupCore
import Tracing

public struct TrelloError: Error, Sendable, CustomStringConvertible {
    /// What failed, read once from Trello's status and answer where they arrive (`TrelloClient`); callers switch over
    /// it and never read the message's text.
    public enum Kind: Sendable, Hashable {
        /// 401 about the token (`invalid token`, `expired token`): the user revoked it or it expired.
        case tokenRejected
        /// 401 or 403 otherwise: the API key, or a permission the token lacks.
        case credentialsRejected
        case notFound
        /// 400 to a webhook: Trello's check of the callback URL (a HEAD request) did not get a 200 from us.
        case callbackUnreachable
        /// Any other 4xx: Trello refuses the request as sent.
        case refused
        case rateLimited
        case serverError
        /// No answer: a timeout, a connection refused or lost.
        case unreachable
        /// An answer we cannot use (not JSON, no id).
        case badReply

        /// The kind an answer with `status` is, `body` telling the 401s and 400s apart.
        public static func answer(status: Int, body: String) -> Kind {
            let text = body.lowercased()
            switch status {
            case 401 where text.contains("token"): return .tokenRejected
            case 400 where text.contains("did not return 200"): return .callbackUnreachable
            default: return Kind(status: status, isTransient: status == 429 || status >= 500)
            }
        }

        init(status: Int?, isTransient: Bool) {
            switch status {
            case nil: self = isTransient ? .unreachable : .badReply
            case 401?, 403?: self = .credentialsRejected
            case 404?: self = .notFound
            case 429?: self = .rateLimited
            case let code? where code >= 500: self = .serverError
            case let code? where code >= 400: self = .refused
            default: self = .badReply
            }
        }
    }

    public var status: Int?
    public var message: String
    public var kind: Kind
    /// 429, 5xx, timeouts and lost connections: worth trying again later.
    public var isTransient: Bool
    public var retryAfter: TimeAmount?

    public init(status: Int?, message: String, isTransient: Bool, retryAfter: TimeAmount? = nil, kind: Kind? = nil) {
        self.status = status
        self.message = message
        self.isTransient = isTransient
        self.retryAfter = retryAfter
        self.kind = kind ?? Kind(status: status, isTransient: isTransient)
    }

    /// The token or the key was refused: the account's credentials, not the request, are at fault.
    public var isCredentialFailure: Bool { kind == .tokenRejected || kind == .credentialsRejected }

    public var description: String {
        if let status { return "trello \(status): \(message)" }
        return "trello: \(message)"
    }
}

/// How long a request may wait for Trello's rate limits (`TrelloRequestGate.acquire`, a 429's retry) before it gives
/// up with `TrelloThrottled` instead of being sent. Unset, it waits as long as the limits say. A caller with other
/// work to do sets it for its task: a worker's batch defers the cards of an account whose token is throttled instead of
/// holding every other account's entries back while it waits.
public enum TrelloWait {
    @TaskLocal public static var limit: Duration?

    /// Whether a wait of `milliseconds` (after `waited` already) goes past the task's limit.
    public static func exceeds(milliseconds: Int, waited: Int = 0) -> Bool {
        guard let limit else { return false }
        return Duration.milliseconds(waited + milliseconds) > limit
    }
}

/// A request not sent because Trello's rate limits would have held it longer than `TrelloWait.limit`.
public struct TrelloThrottled: Error, Sendable, CustomStringConvertible {
    /// How long the limits said to wait.
    public var wait: Duration

    public init(wait: Duration) { self.wait = wait }

    public var description: String { "trello rate limit: the token may send again in \(wait)" }
}

/// Where every process agrees how fast it may call Trello: a request waits in `acquire` until it fits the
/// shared limits (or throws `TrelloThrottled` past `TrelloWait.limit`), and each answer's status and
/// `x-rate-limit-*` headers are reported back.
public protocol TrelloRequestGate: Sendable {
    func acquire(_ credentials: TrelloCredentials) async throws
    func observe(_ credentials: TrelloCredentials, status: Int, headers: HTTPHeaders) async
}

/// Trello's REST API, with key+token auth in a header (never in the URL, so never in a log line),
/// timeouts, shared rate limits (`gate`), and retries with exponential backoff and jitter on 429, 5xx and timeouts.
public struct TrelloClient: Sendable {
    public let baseURL: String
    let http: HTTPClient
    let timeout: TimeAmount
    let maxAttempts: Int
    let logger: Logger
    let gate: (any TrelloRequestGate)?

    /// A transport error without its associated values: AsyncHTTPClient's can quote the request's headers, and the
    /// Authorization header holds the account's key and token. This text reaches logs and API error bodies.
    public static func describe(_ error: any Error) -> String {
        let text = String(describing: error)
        guard error is HTTPClientError, let open = text.firstIndex(of: "(") else { return text }
        return String(text[..<open])
    }

    public init(
        baseURL: String, http: HTTPClient, timeout: TimeAmount = .seconds(10), maxAttempts: Int = 3, gate: (any TrelloRequestGate)? = nil,
        logger: Logger
    ) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.http = http
        self.timeout = timeout
        self.maxAttempts = maxAttempts
        self.gate = gate
        self.logger = logger
    }

    /// The same client with another number of attempts (sync jobs retry at their own level).
    public func with(maxAttempts: Int) -> TrelloClient {
        TrelloClient(baseURL: baseURL, http: http, timeout: timeout, maxAttempts: maxAttempts, gate: gate, logger: logger)
    }

    static let cardQuery = "fields=all&customFieldItems=true&checklists=all&attachments=true"

    /// The full card, or nil when Trello says it no longer exists.
    public func card(id: String, credentials: TrelloCredentials) async throws -> [String: JSONValue]? {
        guard let value = try await get("/cards/\(Self.escape(id))?\(Self.cardQuery)", credentials: credentials, notFoundIsNil: true) else {
            return nil
        }
        guard let object = value.objectValue else { throw TrelloError(status: nil, message: "card \(id) is not a JSON object", isTransient: false) }
        return object
    }

    /// The id of the member the token belongs to (`GET /members/me`).
    public func memberID(credentials: TrelloCredentials) async throws -> String {
        guard let id = try await get("/members/me?fields=id", credentials: credentials, notFoundIsNil: false)?["id"]?.stringValue else {
            throw TrelloError(status: 200, message: "the member reply has no id", isTransient: false)
        }
        return id
    }

    /// The board's Priority dropdown custom field, if it has one.
    public func priorityField(boardID: String, credentials: TrelloCredentials) async throws -> PriorityField? {
        guard let fields = try await get("/boards/\(Self.escape(boardID))/customFields", credentials: credentials, notFoundIsNil: true)?.arrayValue
        else {
            return nil
        }
        for field in fields {
            guard field["name"]?.stringValue?.lowercased() == "priority", field["type"]?.stringValue == "list",
                let id = field["id"]?.stringValue
            else { continue }
            // In the board's order: by `pos`, then as listed.
            let options = (field["options"]?.arrayValue ?? []).enumerated().compactMap { index, option -> (PriorityField.Option, Double, Int)? in
                guard let optionID = option["id"]?.stringValue, let text = option["value"]?["text"]?.stringValue else { return nil }
                let pos: Double = if case .number(let n)? = option["pos"] { n } else { Double(index) }
                return (PriorityField.Option(id: optionID, text: text), pos, index)
            }
            return PriorityField(fieldID: id, ordered: options.sorted { ($0.1, $0.2) < ($1.1, $1.2) }.map(\.0))
        }
        return nil
    }

    /// Registers a webhook. Trello first checks the callback URL with a HEAD request and refuses unless it answers 200.
    /// Returns the webhook's id.
    public func createWebhook(callbackURL: String, modelID: String, description: String, credentials: TrelloCredentials) async throws -> String {
        let body = JSONValue.object([
            "callbackURL": .string(callbackURL), "idModel": .string(modelID), "description": .string(description),
        ])
        let reply = try await send(.POST, "/webhooks", body: body, credentials: credentials, idempotent: false)
        guard let id = reply?["id"]?.stringValue else {
            throw TrelloError(status: 200, message: "webhook reply has no id", isTransient: false)
        }
        return id
    }

    /// Deletes a webhook; one already gone counts as deleted.
    public func deleteWebhook(id: String, credentials: TrelloCredentials) async throws {
        _ = try await send(.DELETE, "/webhooks/\(Self.escape(id))", body: nil, credentials: credentials, notFoundIsNil: true)
    }

    public struct WebhookInfo: Sendable, Equatable {
        public var id: String
        public var idModel: String
        public var callbackURL: String
        public var active: Bool
    }

    /// A webhook as Trello has it; nil when it no longer exists.
    public func webhook(id: String, credentials: TrelloCredentials) async throws -> WebhookInfo? {
        guard let value = try await get("/webhooks/\(Self.escape(id))", credentials: credentials, notFoundIsNil: true) else { return nil }
        guard let hookID = value["id"]?.stringValue, let model = value["idModel"]?.stringValue, let callback = value["callbackURL"]?.stringValue
        else {
            throw TrelloError(status: 200, message: "webhook \(id) reply is not a webhook", isTransient: false)
        }
        return WebhookInfo(id: hookID, idModel: model, callbackURL: callback, active: value["active"]?.boolValue ?? true)
    }

    /// A list as Trello has it: its board, its name, whether it is archived.
    public struct ListInfo: Sendable, Equatable {
        public var id: String
        public var boardID: String
        public var name: String
        public var closed: Bool

        public init(id: String, boardID: String, name: String, closed: Bool) {
            self.id = id
            self.boardID = boardID
            self.name = name
            self.closed = closed
        }
    }

    /// A list as Trello has it (`GET /lists/{id}?fields=idBoard,name,closed`); nil when Trello has no such list (404).
    public func list(id: String, credentials: TrelloCredentials) async throws -> ListInfo? {
        guard let value = try await get("/lists/\(Self.escape(id))?fields=idBoard,name,closed", credentials: credentials, notFoundIsNil: true)
        else { return nil }
        guard let board = value["idBoard"]?.stringValue else {
            throw TrelloError(status: 200, message: "list \(id) reply is not a list", isTransient: false)
        }
        return ListInfo(
            id: value["id"]?.stringValue ?? id, boardID: board, name: value["name"]?.stringValue ?? "", closed: value["closed"]?.boolValue ?? false)
    }

    // MARK: Card writes

    /// Creates a card (`attributes`: name, desc, due, start, dueComplete). Not retried after a timeout or a 5xx:
    /// Trello may have made the card, and the caller checks the list before trying again.
    public func createCard(listID: String, attributes: [String: JSONValue], credentials: TrelloCredentials) async throws -> [String: JSONValue] {
        var body = attributes
        body["idList"] = .string(listID)
        body["pos"] = .string("bottom")
        guard let card = try await send(.POST, "/cards", body: .object(body), credentials: credentials, idempotent: false)?.objectValue,
            card["id"]?.stringValue != nil
        else { throw TrelloError(status: 200, message: "card reply has no id", isTransient: false) }
        return card
    }

    /// Updates a card's attributes; nil when the card no longer exists.
    public func updateCard(id: String, attributes: [String: JSONValue], credentials: TrelloCredentials) async throws -> [String: JSONValue]? {
        try await send(.PUT, "/cards/\(Self.escape(id))", body: .object(attributes), credentials: credentials, notFoundIsNil: true)?.objectValue
    }

    /// Deletes a card for good; false when it was already gone.
    public func deleteCard(id: String, credentials: TrelloCredentials) async throws -> Bool {
        try await send(.DELETE, "/cards/\(Self.escape(id))", body: nil, credentials: credentials, notFoundIsNil: true) != nil
    }

    /// One page of a list's open cards, newest first; pass the last card's id as `before` for the next page.
    /// A list Trello no longer has answers 404: an error, never an empty list (which would read as every card gone).
    public func openCards(listID: String, before: String?, limit: Int, credentials: TrelloCredentials) async throws -> [[String: JSONValue]] {
        var path = "/lists/\(Self.escape(listID))/cards?filter=open&\(Self.cardQuery)&limit=\(limit)"
        if let before { path += "&before=\(Self.escape(before))" }
        guard let value = try await get(path, credentials: credentials, notFoundIsNil: true) else {
            throw TrelloError(status: 404, message: "list \(listID) not found in Trello", isTransient: false)
        }
        return (value.arrayValue ?? []).compactMap(\.objectValue)
    }

    /// Sets (or, with nil, clears) a dropdown custom field of a card. Trello answers 400 for an unknown option id.
    public func setCustomFieldOption(cardID: String, fieldID: String, optionID: String?, credentials: TrelloCredentials) async throws {
        _ = try await send(
            .PUT, "/cards/\(Self.escape(cardID))/customField/\(Self.escape(fieldID))/item",
            body: .object(["idValue": .string(optionID ?? "")]), credentials: credentials)
    }

    /// Adds a link attachment (named `name`, else by Trello after the URL); returns it.
    public func addURLAttachment(
        cardID: String, url: String, name: String? = nil, credentials: TrelloCredentials
    ) async throws -> [String: JSONValue] {
        var body: [String: JSONValue] = ["url": .string(url)]
        if let name { body["name"] = .string(name) }
        return try await send(.POST, "/cards/\(Self.escape(cardID))/attachments", body: .object(body), credentials: credentials, idempotent: false)?
            .objectValue ?? [:]
    }

    public func deleteAttachment(cardID: String, attachmentID: String, credentials: TrelloCredentials) async throws {
        _ = try await send(
            .DELETE, "/cards/\(Self.escape(cardID))/attachments/\(Self.escape(attachmentID))", body: nil, credentials: credentials,
            notFoundIsNil: true)
    }

    /// The board's labels, `{id, name, color}` each (`GET /boards/{id}/labels`).
    public func boardLabels(boardID: String, credentials: TrelloCredentials) async throws -> [[String: JSONValue]] {
        guard
            let value = try await get(
                "/boards/\(Self.escape(boardID))/labels?fields=id,name,color&limit=1000", credentials: credentials, notFoundIsNil: true)
        else { return [] }
        return (value.arrayValue ?? []).compactMap(\.objectValue)
    }

    // MARK: Checklists

    /// Adds a checklist at the bottom of the card; returns it (`{id, name, checkItems}`).
    public func createChecklist(cardID: String, name: String, credentials: TrelloCredentials) async throws -> [String: JSONValue] {
        let reply = try await send(
            .POST, "/cards/\(Self.escape(cardID))/checklists", body: .object(["name": .string(name), "pos": "bottom"]), credentials: credentials,
            idempotent: false)
        guard let checklist = reply?.objectValue, checklist["id"]?.stringValue != nil else {
            throw TrelloError(status: 200, message: "checklist reply has no id", isTransient: false)
        }
        return checklist
    }

    public func renameChecklist(id: String, name: String, credentials: TrelloCredentials) async throws {
        _ = try await send(
            .PUT, "/checklists/\(Self.escape(id))", body: .object(["name": .string(name)]), credentials: credentials, notFoundIsNil: true)
    }

    /// Deletes a checklist with its items; one already gone counts as deleted.
    public func deleteChecklist(id: String, credentials: TrelloCredentials) async throws {
        _ = try await send(.DELETE, "/checklists/\(Self.escape(id))", body: nil, credentials: credentials, notFoundIsNil: true)
    }

    /// Adds an item at the bottom of a checklist; returns it (`{id, name, state, pos}`).
    public func addCheckItem(
        checklistID: String, name: String, checked: Bool, credentials: TrelloCredentials
    ) async throws -> [String: JSONValue] {
        let reply = try await send(
            .POST, "/checklists/\(Self.escape(checklistID))/checkItems",
            body: .object(["name": .string(name), "checked": .bool(checked), "pos": "bottom"]), credentials: credentials, idempotent: false)
        guard let item = reply?.objectValue, item["id"]?.stringValue != nil else {
            throw TrelloError(status: 200, message: "check item reply has no id", isTransient: false)
        }
        return item
    }

    /// Renames an item, ticks or unticks it (`state`: complete or incomplete); false when it no longer exists.
    public func updateCheckItem(
        cardID: String, itemID: String, name: String?, completed: Bool?, credentials: TrelloCredentials
    ) async throws -> Bool {
        var body: [String: JSONValue] = [:]
        if let name { body["name"] = .string(name) }
        if let completed { body["state"] = .string(completed ? "complete" : "incomplete") }
        return try await send(
            .PUT, "/cards/\(Self.escape(cardID))/checkItem/\(Self.escape(itemID))", body: .object(body), credentials: credentials,
            notFoundIsNil: true) != nil
    }

    /// Deletes an item; one already gone counts as deleted.
    public func deleteCheckItem(cardID: String, itemID: String, credentials: TrelloCredentials) async throws {
        _ = try await send(
            .DELETE, "/cards/\(Self.escape(cardID))/checkItem/\(Self.escape(itemID))", body: nil, credentials: credentials, notFoundIsNil: true)
    }

    // MARK: Requests

    /// The HTTP client for Trello's API, its own spans off: `sendOnce` traces each request named by its route, without
    /// the query or the full URL the client's spans would carry.
    public static func makeHTTPClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    func get(_ path: String, credentials: TrelloCredentials, notFoundIsNil: Bool) async throws -> JSONValue? {
        try await send(.GET, path, body: nil, credentials: credentials, notFoundIsNil: notFoundIsNil)
    }

    /// One request with retries. `idempotent: false` retries only answers that say Trello did nothing (429);
    /// a timeout or a 5xx may have been applied.
    func send(
        _ method: HTTPMethod, _ path: String, body: JSONValue?, credentials: TrelloCredentials, notFoundIsNil: Bool = false,
        idempotent: Bool = true
    ) async throws -> JSONValue? {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await sendOnce(method, path, body: body, credentials: credentials, notFoundIsNil: notFoundIsNil)
            } catch let error as TrelloError where error.isTransient && attempt < maxAttempts && (idempotent || error.status == 429) {
                let base = 200.0 * pow(2.0, Double(attempt - 1))
                let delayMS = error.retryAfter.map { Double($0.nanoseconds) / 1e6 } ?? (base + Double.random(in: 0...base))
                if error.status == 429, TrelloWait.exceeds(milliseconds: Int(min(delayMS, 10_000))) {
                    throw TrelloThrottled(wait: .milliseconds(Int(min(delayMS, 10_000))))
                }
                logger.debug(
                    "trello request retry",
                    metadata: ["path": "\(path.split(separator: "?").first ?? "")", "attempt": "\(attempt)", "error": "\(error)"])
                try await Task.sleep(for: .milliseconds(Int(min(delayMS, 10_000))))
            }
        }
    }

    private func sendOnce(
        _ method: HTTPMethod, _ path: String, body: JSONValue?, credentials: TrelloCredentials, notFoundIsNil: Bool
    ) async throws -> JSONValue? {
        // Within a trace (a worker's batch, a job: tracing on), each request is a client span, named by its route
        // (ids as `{id}`, no query); outside one, nothing is traced.
        guard let parent = ServiceContext.current else {
            return try await sendUntraced(method, path, body: body, credentials: credentials, notFoundIsNil: notFoundIsNil)
        }
        let template = Self.template(path)
        let span = InstrumentationSystem.tracer.startSpan("\(method.rawValue) \(template)", context: parent, ofKind: .client)
        defer { span.end() }
        span.attributes["http.request.method"] = method.rawValue
        span.attributes["url.template"] = template
        span.attributes["server.address"] = URL(string: baseURL)?.host ?? ""
        do {
            let answer = try await ServiceContext.withValue(span.context) {
                try await sendUntraced(method, path, body: body, credentials: credentials, notFoundIsNil: notFoundIsNil)
            }
            span.attributes["http.response.status_code"] = answer == nil ? 404 : 200
            return answer
        } catch let error as TrelloError {
            if let status = error.status { span.attributes["http.response.status_code"] = status }
            span.attributes["error.type"] = error.status.map(String.init) ?? "request_failed"
            span.setStatus(SpanStatus(code: .error))
            throw error
        } catch {
            span.attributes["error.type"] = "\(type(of: error))"
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    /// A path as a trace names it: ids (a segment with a digit, or of hex digits only) as `{id}`, no query.
    static func template(_ path: String) -> String {
        let route = path.split(separator: "?", maxSplits: 1).first ?? ""
        let segments = route.split(separator: "/", omittingEmptySubsequences: false).map { segment -> Substring in
            let isID = segment.contains(where: \.isNumber) || (segment.count >= 8 && segment.allSatisfy(\.isHexDigit))
            return isID ? "{id}" : segment
        }
        return "/1" + segments.joined(separator: "/")
    }

    private func sendUntraced(
        _ method: HTTPMethod, _ path: String, body: JSONValue?, credentials: TrelloCredentials, notFoundIsNil: Bool
    ) async throws -> JSONValue? {
        try await gate?.acquire(credentials)
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        request.headers.add(name: "Authorization", value: credentials.authorizationHeader)
        request.headers.add(name: "Accept", value: "application/json")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body.canonicalJSON))
        }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: timeout, logger: logger)
        } catch {
            throw TrelloError(status: nil, message: "request failed: \(Self.describe(error))", isTransient: true)
        }
        let text = try await response.body.collect(upTo: 8 << 20)
        let status = Int(response.status.code)
        Self.count(status: status)
        await gate?.observe(credentials, status: status, headers: response.headers)
        switch status {
        case 200..<300:
            if text.readableBytes == 0 { return .null }
            do {
                return try JSONParser.parse(text.readableBytesView)
            } catch {
                throw TrelloError(status: status, message: "response is not JSON", isTransient: false)
            }
        case 404 where notFoundIsNil:
            return nil
        case 429, 500..<600:
            let retryAfter = Self.retryAfterSeconds(response.headers.first(name: "retry-after")).map { TimeAmount.seconds(Int64($0)) }
            throw TrelloError(status: status, message: String(buffer: text).prefix(200).description, isTransient: true, retryAfter: retryAfter)
        default:
            let answer = String(buffer: text)
            throw TrelloError(
                status: status, message: answer.prefix(200).description, isTransient: false, kind: .answer(status: status, body: answer))
        }
    }

    /// The longest `Retry-After` honoured. Trello's own windows are 10 seconds (100 requests per token, 300 per key): a
    /// larger value, from Trello or a proxy in its place, is capped near them (and logged where it is obeyed,
    /// `RedisTrelloGate`), so one absurd header cannot stop an account's Trello work for long. It never overflows.
    public static let maxRetryAfterSeconds = 60

    /// A `Retry-After` header in whole seconds, clamped to 0...`maxRetryAfterSeconds`; nil when absent or not a number
    /// (an HTTP date counts as absent). Trello sends seconds.
    public static func retryAfterSeconds(_ header: String?) -> Int? { retryAfter(header)?.seconds }

    /// The same, and whether the header asked for more than `maxRetryAfterSeconds`.
    public static func retryAfter(_ header: String?) -> (seconds: Int, capped: Bool)? {
        guard let text = header?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        let digits = text.hasPrefix("-") || text.hasPrefix("+") ? text.dropFirst() : Substring(text)
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        if text.hasPrefix("-") { return (0, false) }
        // Past Int's range it is still "a very long time": the ceiling, not a failed parse.
        guard digits.count <= 18, let seconds = Int(digits) else { return (maxRetryAfterSeconds, true) }
        return (min(seconds, maxRetryAfterSeconds), seconds > maxRetryAfterSeconds)
    }

    /// `roundup_trello_requests_total{status}` (status class: 2xx, 4xx, 429, 5xx).
    static func count(status: Int) {
        let label = status == 429 ? "429" : "\(status / 100)xx"
        Counter(label: "roundup_trello_requests_total", dimensions: [("status", label)]).increment()
    }

    /// Percent-encodes an id for a path segment (RFC 3986 unreserved characters stay as they are).
    static func escape(_ id: String) -> String {
        id.addingPercentEncoding(
            withAllowedCharacters: CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")) ?? id
    }
}

/// Key and token, sent as Trello's OAuth-style Authorization header.
extension TrelloCredentials {
    /// Trello's OAuth header: the key and token travel in it, never in a URL (so never in a log line).
    public var authorizationHeader: String { "OAuth oauth_consumer_key=\"\(apiKey)\", oauth_token=\"\(token)\"" }
}
