import AsyncHTTPClient
public import Foundation
public import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
public import RoundupCore
import RoundupRuntime

/// A stand-in for api.trello.com/1, over real HTTP on loopback. It keeps cards, lists, board custom fields and
/// webhooks; answers card reads and writes as Trello does; checks key+token auth (401 "invalid key" / "invalid
/// token"); enforces Trello's per-token rate limit when given one; can be told to fail; and, like Trello, POSTs a
/// signed webhook body to the registered callbacks for every change, whether made over REST or by a person in
/// Trello's UI (`userCreateCard` and friends). The writes, webhooks and user edits are in FakeTrello+Writes.swift.
public final class FakeTrello: Sendable {
    public struct State: Sendable {
        public var cards: [String: [String: JSONValue]] = [:]
        /// Board id → its custom fields, as `GET /1/boards/{id}/customFields` returns them.
        public var customFields: [String: [JSONValue]] = [:]
        /// "METHOD /path" (percent-decoded, no query) of every request received, authorized or not.
        public var requests: [String] = []
        /// Answer the next N requests whose path starts with `failNextPathPrefix` with this status
        /// (429 comes with Trello's headers and `retry-after: 0`).
        public var failNext: (status: Int, count: Int)?
        public var failNextPathPrefix = "/1/cards/"
        public var apiKey = "test-api-key"
        public var token = "test-token"
        /// Tokens accepted besides `token` (one per account, say).
        public var tokens: Set<String> = []
        /// Known lists: list id → board id. `setCard` adds the list of a card it stores.
        public var lists: [String: String] = [:]
        /// Known lists that are archived (`closed: true` in `GET /1/lists/{id}`).
        public var closedLists: Set<String> = []
        /// Lists renamed (`userUpdateList`); the others are named `FakeTrello.listName`.
        public var listNames: [String: String] = [:]
        /// How long each request under /1/cards/ takes (a slow Trello).
        public var cardDelay: Duration = .zero
        /// How long every authorized request takes (a slow Trello for every path).
        public var requestDelay: Duration = .zero
        /// Webhooks Trello has deactivated (kept, `active: false`, delivering nothing).
        public var inactiveWebhooks: Set<String> = []
        /// `GET /1/lists/{id}/cards` in flight per list, and the most ever at once.
        public var listReadsInFlight: [String: Int] = [:]
        public var listReadsMax: [String: Int] = [:]
        /// Webhooks by id, as Trello keeps them.
        public var webhooks: [String: Webhook] = [:]
        public var nextID = 1
        /// The first 8 hex digits of the ids this fake makes (random, so two fakes do not make the same ids).
        public var idPrefix = FakeTrello.randomHex(8)
        /// The secret webhook bodies are signed with (Trello signs with the application's secret).
        public var webhookSecret = "test-webhook-secret"
        /// Whether changes are sent to the registered webhooks.
        public var deliverWebhooks = true
        /// Deliveries answered 2xx.
        public var webhooksSent = 0
        /// Deliveries given up after their retries (or answered 410, which removes the webhook, as Trello does).
        public var webhookFailures = 0
        /// Delivery tasks (one per action) not finished yet.
        public var webhooksInFlight = 0
        /// The date of the last action made. Trello dates actions in milliseconds, and two actions of one card never
        /// share a date there (each is a request of its own, which takes longer than that); calls of this fake a few
        /// microseconds apart would, so each action is dated at least a millisecond after the one before (and so may run a
        /// few milliseconds ahead of the clock after a burst: a test that orders another side's edit after them waits
        /// for the clock to pass it).
        public internal(set) var lastActionDate = Date.distantPast
        /// Trello's per-token limit: at most this many requests in any 10 s window (nil: no limit).
        public var tokenLimit: Int?
        /// When each authorized request arrived (those answered 429 included), by token.
        public var arrivals: [String: [ContinuousClock.Instant]] = [:]
        /// Cards created over REST (`POST /1/cards`).
        public var cardsCreated = 0
        /// Board id → its labels (`{id, name, color}`), as `GET /1/boards/{id}/labels` returns them.
        public var boardLabels: [String: [JSONValue]] = [:]
    }

    public struct Webhook: Sendable, Equatable {
        public var id: String
        public var idModel: String
        public var callbackURL: String
        public var description: String
    }

    public var webhooks: [Webhook] { state.withLockedValue { Array($0.webhooks.values) }.sorted { $0.id < $1.id } }

    public let state = NIOLockedValueBox(State())
    private let server: SimpleHTTPServer
    let http = HTTPClient(eventLoopGroupProvider: .singleton)
    /// The last webhook delivery task: each new one waits for it, so deliveries arrive in the order of the changes.
    let lastDelivery = NIOLockedValueBox<Task<Void, Never>?>(nil)

    public var baseURL: String { "http://127.0.0.1:\(server.port)/1" }

    private init(server: SimpleHTTPServer) { self.server = server }

    public static func start() async throws -> FakeTrello {
        let box = NIOLockedValueBox<FakeTrello?>(nil)
        let server = try await SimpleHTTPServer.start(host: "127.0.0.1", port: 0) { request in
            guard let fake = box.withLockedValue({ $0 }) else { return .text(.serviceUnavailable, "starting") }
            return await fake.serve(request)
        }
        let fake = FakeTrello(server: server)
        box.withLockedValue { $0 = fake }
        return fake
    }

    let stopped = NIOLockedValueBox(false)

    /// Stops serving. Webhook deliveries not yet made are dropped (those under way are waited for, up to 10 s).
    public func stop() async {
        stopped.withLockedValue { $0 = true }
        await waitForWebhookDeliveries()
        await server.stop()
        try? await http.shutdown()
    }

    deinit {
        if !stopped.withLockedValue({ $0 }) { try? http.syncShutdown() }
    }

    /// Stores a card as is (no webhook). Its list becomes known, on the card's board, unless it already is.
    public func setCard(_ card: [String: JSONValue]) {
        guard let id = card["id"]?.stringValue else { return }
        state.withLockedValue { state in
            state.cards[id] = card
            if let list = card["idList"]?.stringValue, let board = card["idBoard"]?.stringValue, state.lists[list] == nil {
                state.lists[list] = board
            }
        }
    }

    public func setCardDelay(_ delay: Duration) { state.withLockedValue { $0.cardDelay = delay } }

    /// Answers the next `count` authorized requests whose path starts with `pathPrefix` with `status`
    /// (429 with Trello's rate-limit headers and `retry-after: 0`). A count of 0 clears it.
    public func failNextRequests(status: Int, count: Int, pathPrefix: String = "/1/") {
        state.withLockedValue { state in
            state.failNext = (status, count)
            state.failNextPathPrefix = pathPrefix
        }
    }

    public func failNextCardRequests(status: Int, count: Int) { failNextRequests(status: status, count: count, pathPrefix: "/1/cards/") }

    /// Requests that change something (every method but GET), as `METHOD /1/path`.
    public var writeRequests: [String] { state.withLockedValue { $0.requests.filter { !$0.hasPrefix("GET ") } } }
    public var cardRequests: Int { state.withLockedValue { $0.requests.filter { $0.hasPrefix("GET /1/cards/") }.count } }

    /// Accepts another token (with the same API key).
    public func addToken(_ token: String) { state.withLockedValue { _ = $0.tokens.insert(token) } }

    /// Makes a list known, on a board: cards can be created in it and it can be listed.
    public func addList(id: String, boardID: String) { state.withLockedValue { $0.lists[id] = boardID } }

    /// Archives a known list (or brings it back): `GET /1/lists/{id}` says `closed`.
    public func setListClosed(_ id: String, _ closed: Bool = true) {
        state.withLockedValue { state in
            if closed { state.closedLists.insert(id) } else { state.closedLists.remove(id) }
        }
    }

    /// A card as `GET /cards/{id}?fields=all&…` returns it.
    public static func card(
        id: String, listID: String, boardID: String, name: String, desc: String = "", due: String? = nil,
        dueComplete: Bool = false, closed: Bool = false
    ) -> [String: JSONValue] {
        [
            "id": .string(id), "idList": .string(listID), "idBoard": .string(boardID), "name": .string(name),
            "desc": .string(desc), "due": due.map(JSONValue.string) ?? .null, "start": .null, "dueComplete": .bool(dueComplete),
            "closed": .bool(closed), "idLabels": .array([]), "labels": .array([]), "idMembers": .array([]), "checklists": .array([]),
            "attachments": .array([]), "customFieldItems": .array([]), "pos": .number(16384), "dueReminder": .null,
            "shortUrl": .string("https://trello.com/c/" + String(id.suffix(8))),
        ]
    }

    // MARK: Serving

    /// What an admitted request carries on: its token, the rate-limit headers for its answer, how long to stall it.
    struct Grant {
        var token: String
        var headers: HTTPHeaders
        var delay: Duration
    }

    /// A request Trello refuses, with Trello's answer.
    struct Refusal: Error {
        var response: SimpleHTTPResponse

        static var notFound: Refusal { Refusal(response: .text(.notFound, "The requested resource was not found.")) }

        /// Trello's plain-text 400 for a bad parameter.
        static func invalid(_ parameter: String) -> Refusal {
            Refusal(response: .text(.badRequest, "invalid value for \(parameter)"))
        }

        /// The JSON form of it, as the custom-field endpoints answer.
        static func invalidJSON(_ parameter: String) -> Refusal {
            let body = JSONValue.object(["message": .string("invalid value for \(parameter)"), "error": "ERROR"])
            return Refusal(response: .json(.badRequest, body.canonicalJSON))
        }
    }

    static let rateWindow: Duration = .seconds(10)

    /// Admits a request as Trello does, then answers it; every authorized answer carries Trello's rate-limit headers.
    func serve(_ request: SimpleHTTPRequest) async -> SimpleHTTPResponse {
        let path = String(request.path).removingPercentEncoding ?? String(request.path)
        let query = Self.formParameters(request.query ?? "")
        // Trello takes key and token from the OAuth header or, failing that, the query string.
        let authorization = request.headers.first(name: "authorization") ?? ""
        let key = Self.oauthParameter("oauth_consumer_key", in: authorization) ?? query["key"]?.stringValue
        let token = Self.oauthParameter("oauth_token", in: authorization) ?? query["token"]?.stringValue
        let grant: Grant
        switch admit(method: request.method, path: path, key: key, token: token) {
        case .failure(let refusal): return refusal.response
        case .success(let admitted): grant = admitted
        }
        let parts = path.split(separator: "/")
        let listRead = request.method == .GET && parts.count == 4 && parts[1] == "lists" && parts[3] == "cards" ? String(parts[2]) : nil
        if let listRead {
            state.withLockedValue { state in
                state.listReadsInFlight[listRead, default: 0] += 1
                state.listReadsMax[listRead] = Swift.max(state.listReadsMax[listRead] ?? 0, state.listReadsInFlight[listRead]!)
            }
        }
        defer { if let listRead { state.withLockedValue { $0.listReadsInFlight[listRead, default: 1] -= 1 } } }
        if grant.delay > .zero { try? await Task.sleep(for: grant.delay) }
        var response: SimpleHTTPResponse
        if let params = Self.parameters(of: request, query: query) {
            response = await route(request.method, path: path, params: params, token: grant.token)
        } else {
            response = .text(.badRequest, "invalid JSON")
        }
        response.headers.add(contentsOf: grant.headers)
        return response
    }

    /// Records the request, then checks, in Trello's order: key, token, the token's rate limit, then any forced failure.
    func admit(method: HTTPMethod, path: String, key: String?, token: String?) -> Result<Grant, Refusal> {
        state.withLockedValue { state -> Result<Grant, Refusal> in
            state.requests.append("\(method.rawValue) \(path)")
            guard let key, key == state.apiKey else { return .failure(Refusal(response: .text(.unauthorized, "invalid key"))) }
            guard let token, token == state.token || state.tokens.contains(token) else {
                return .failure(Refusal(response: .text(.unauthorized, "invalid token")))
            }
            // Arrivals are in time order: count back from the newest while inside the window.
            let now = ContinuousClock.now
            let recent = state.arrivals[token, default: []].reversed().prefix(while: { now - $0 < Self.rateWindow }).count
            state.arrivals[token, default: []].append(now)
            // No limit set: a fake Trello "with no rate limit" advertises one nobody reaches.
            let ceiling = state.tokenLimit ?? 1_000_000
            if let limit = state.tokenLimit, recent >= limit {
                return .failure(Refusal(response: Self.tokenLimitExceeded(limit: limit, retryAfter: false)))
            }
            var headers = HTTPHeaders()
            headers.add(name: "x-rate-limit-api-token-interval-ms", value: "10000")
            headers.add(name: "x-rate-limit-api-token-max", value: String(ceiling))
            headers.add(name: "x-rate-limit-api-token-remaining", value: String(Swift.max(0, ceiling - recent - 1)))
            if let failure = state.failNext, failure.count > 0, path.hasPrefix(state.failNextPathPrefix) {
                state.failNext = failure.count > 1 ? (failure.status, failure.count - 1) : nil
                if failure.status == 429 { return .failure(Refusal(response: Self.tokenLimitExceeded(limit: ceiling, retryAfter: true))) }
                var response = SimpleHTTPResponse.text(HTTPResponseStatus(statusCode: failure.status), "Internal error")
                response.headers.add(contentsOf: headers)
                return .failure(Refusal(response: response))
            }
            let delay = (path.hasPrefix("/1/cards/") ? state.cardDelay : .zero) + state.requestDelay
            return .success(Grant(token: token, headers: headers, delay: delay))
        }
    }

    /// Trello's 429 for a token over its limit.
    static func tokenLimitExceeded(limit: Int, retryAfter: Bool) -> SimpleHTTPResponse {
        var response = SimpleHTTPResponse.json(.tooManyRequests, #"{"error":"API_TOKEN_LIMIT_EXCEEDED","message":"Rate limit exceeded"}"#)
        response.headers.add(name: "x-rate-limit-api-token-interval-ms", value: "10000")
        response.headers.add(name: "x-rate-limit-api-token-max", value: String(limit))
        response.headers.add(name: "x-rate-limit-api-token-remaining", value: "0")
        if retryAfter { response.headers.add(name: "retry-after", value: "0") }
        return response
    }

    /// Answers an admitted request.
    func route(_ method: HTTPMethod, path: String, params: [String: JSONValue], token: String) async -> SimpleHTTPResponse {
        let p = path.split(separator: "/").map(String.init)
        let member = Member.api(token: token)
        guard p.first == "1" else { return .text(.notFound, "Cannot \(method.rawValue) \(path)") }
        switch (method, p.count) {
        case (.POST, 2) where p[1] == "webhooks":
            return await createWebhook(params)
        case (.GET, 3) where p[1] == "webhooks":
            guard let hook = state.withLockedValue({ state in state.webhooks[p[2]].map { ($0, !state.inactiveWebhooks.contains($0.id)) } }) else {
                return .text(.notFound, "The requested resource was not found.")
            }
            return .json(
                .ok,
                JSONValue.object([
                    "id": .string(hook.0.id), "idModel": .string(hook.0.idModel), "callbackURL": .string(hook.0.callbackURL),
                    "description": .string(hook.0.description), "active": .bool(hook.1), "consecutiveFailures": .number(hook.1 ? 0 : 1000),
                ]).canonicalJSON)
        case (.DELETE, 3) where p[1] == "webhooks":
            let removed = state.withLockedValue { $0.webhooks.removeValue(forKey: p[2]) }
            return removed == nil ? .text(.notFound, "model not found") : .json(.ok, #"{"_value":null}"#)
        case (.GET, 4) where p[1] == "boards" && p[3] == "customFields":
            let fields = state.withLockedValue { $0.customFields[p[2]] } ?? []
            return .json(.ok, JSONValue.array(fields).canonicalJSON)
        case (.GET, 4) where p[1] == "boards" && p[3] == "labels":
            let labels = state.withLockedValue { $0.boardLabels[p[2]] } ?? []
            return .json(.ok, JSONValue.array(labels).canonicalJSON)
        case (.POST, 4) where p[1] == "cards" && p[3] == "checklists":
            return Self.response(perform { $0.createChecklist(cardID: p[2], params, member: member) })
        case (.PUT, 3) where p[1] == "checklists":
            return Self.response(perform { $0.renameChecklist(id: p[2], params, member: member) })
        case (.DELETE, 3) where p[1] == "checklists":
            return Self.response(perform { $0.deleteChecklist(id: p[2], member: member) })
        case (.POST, 4) where p[1] == "checklists" && p[3] == "checkItems":
            return Self.response(perform { $0.addCheckItem(checklistID: p[2], params, member: member) })
        case (.PUT, 5) where p[1] == "cards" && p[3] == "checkItem":
            return Self.response(perform { $0.updateCheckItem(cardID: p[2], itemID: p[4], params, member: member) })
        case (.DELETE, 5) where p[1] == "cards" && p[3] == "checkItem":
            return Self.response(perform { $0.deleteCheckItem(cardID: p[2], itemID: p[4], member: member) })
        case (.GET, 3) where p[1] == "members" && p[2] == "me":
            return .json(.ok, member.json.canonicalJSON)
        case (.GET, 3) where p[1] == "cards":
            guard let card = state.withLockedValue({ $0.cards[p[2]] }) else { return Refusal.notFound.response }
            return .json(.ok, JSONValue.object(card).canonicalJSON)
        case (.POST, 2) where p[1] == "cards":
            return Self.response(
                perform { state in
                    let result = state.createCard(params, member: member)
                    if case .success = result { state.cardsCreated += 1 }
                    return result
                })
        case (.PUT, 3) where p[1] == "cards":
            return Self.response(perform { $0.updateCard(id: p[2], params, member: member) })
        case (.DELETE, 3) where p[1] == "cards":
            return Self.response(perform { $0.deleteCard(id: p[2], member: member) })
        case (.PUT, 6) where p[1] == "cards" && p[3] == "customField" && p[5] == "item":
            return Self.response(perform { $0.setCustomFieldItem(cardID: p[2], fieldID: p[4], params, member: member) })
        case (.POST, 4) where p[1] == "cards" && p[3] == "attachments":
            return Self.response(perform { $0.addAttachment(cardID: p[2], params, member: member) })
        case (.DELETE, 5) where p[1] == "cards" && p[3] == "attachments":
            return Self.response(perform { $0.deleteAttachment(cardID: p[2], attachmentID: p[4], member: member) })
        case (.GET, 3) where p[1] == "lists":
            switch state.withLockedValue({ $0.list(id: p[2], params) }) {
            case .success(let list): return .json(.ok, list.canonicalJSON)
            case .failure(let refusal): return refusal.response
            }
        case (.GET, 4) where p[1] == "lists" && p[3] == "cards":
            switch state.withLockedValue({ $0.listCards(listID: p[2], params) }) {
            case .success(let cards): return .json(.ok, cards.canonicalJSON)
            case .failure(let refusal): return refusal.response
            }
        default:
            return .text(.notFound, "Cannot \(method.rawValue) \(path)")
        }
    }

    /// What `GET /1/lists/{id}` answers with `fields=all` (or no `fields`).
    static let listFields = ["id", "name", "closed", "color", "idBoard", "pos", "subscribed", "softLimit"]

    /// `POST /1/webhooks`: like Trello, sends HEAD to the callback URL and refuses unless it gets 200.
    func createWebhook(_ params: [String: JSONValue]) async -> SimpleHTTPResponse {
        guard let callback = params["callbackURL"]?.stringValue, let model = params["idModel"]?.stringValue
        else { return .text(.badRequest, "invalid value for callbackURL") }
        let description = params["description"]?.stringValue ?? ""
        var head = HTTPClientRequest(url: callback)
        head.method = .HEAD
        let status: UInt
        do {
            status = try await http.execute(head, timeout: .seconds(5)).status.code
        } catch {
            return .text(.badRequest, "URL (\(callback)) did not return 200 status code, got error")
        }
        guard status == 200 else { return .text(.badRequest, "URL (\(callback)) did not return 200 status code, got \(status)") }
        return state.withLockedValue { state in
            if state.webhooks.values.contains(where: { $0.callbackURL == callback && $0.idModel == model }) {
                return .text(.badRequest, "A webhook with that callback, model, and token already exists")
            }
            let id = String(format: "%024x", state.nextID)
            state.nextID += 1
            state.webhooks[id] = Webhook(id: id, idModel: model, callbackURL: callback, description: description)
            return .json(
                .ok,
                JSONValue.object([
                    "id": .string(id), "idModel": .string(model), "callbackURL": .string(callback), "active": .bool(true),
                    "description": .string(description),
                ]).canonicalJSON)
        }
    }

    // MARK: Parameters

    /// A request's parameters as Trello reads them: the query string, overlaid by the body (JSON, or a form).
    /// Nil when the body is neither.
    static func parameters(of request: SimpleHTTPRequest, query: [String: JSONValue]) -> [String: JSONValue]? {
        var params = query
        guard request.body.readableBytes > 0 else { return params }
        let contentType = request.headers.first(name: "content-type")?.lowercased() ?? ""
        if contentType.hasPrefix("application/x-www-form-urlencoded") {
            for (name, value) in formParameters(Substring(String(buffer: request.body))) { params[name] = value }
            return params
        }
        guard case .object(let object)? = try? JSONParser.parse(request.body.readableBytesView) else { return nil }
        for (name, value) in object { params[name] = value }
        return params
    }

    /// `a=1&b=x+y` → ["a": "1", "b": "x y"] (values stay strings, as Trello receives them).
    static func formParameters(_ text: Substring) -> [String: JSONValue] {
        var params: [String: JSONValue] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = decodeComponent(parts[0])
            guard !name.isEmpty else { continue }
            params[name] = .string(parts.count > 1 ? decodeComponent(parts[1]) : "")
        }
        return params
    }

    private static func decodeComponent(_ text: Substring) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }

    /// `name="value"` from an `Authorization: OAuth …` header.
    static func oauthParameter(_ name: String, in header: String) -> String? {
        guard let start = header.range(of: name + "=\"") else { return nil }
        let rest = header[start.upperBound...]
        guard let end = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[..<end])
    }
}

extension FakeTrello.State {
    /// `GET /1/lists/{id}?fields=…`: the list's `id` and the fields asked for (`all`, the default, for every one);
    /// 404 for a list this fake does not know, 400 for a field Trello has not.
    func list(id: String, _ params: [String: JSONValue]) -> Result<JSONValue, FakeTrello.Refusal> {
        guard let board = boardID(ofList: id) else { return .failure(.notFound) }
        let closed = closedLists.contains(id)
        let values: [String: JSONValue] = [
            "id": .string(id), "name": .string(listName(id)), "closed": .bool(closed), "color": .null, "idBoard": .string(board),
            "pos": .number(65535), "subscribed": .bool(false), "softLimit": .null,
        ]
        let asked = params["fields"]?.stringValue ?? "all"
        let names = asked == "all" ? FakeTrello.listFields : ["id"] + asked.split(separator: ",").map(String.init)
        var answer: [String: JSONValue] = [:]
        for name in names {
            guard let value = values[name] else { return .failure(.invalid("fields")) }
            answer[name] = value
        }
        return .success(.object(answer))
    }
}
