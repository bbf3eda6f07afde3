import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RoundupCore

/// A stand-in for api.trello.com, over real HTTP on loopback: serves cards and board custom fields,
/// checks key+token auth as Trello does (401 "invalid key" / "invalid token"), and can be told to fail.
public final class FakeTrello: Sendable {
    public struct State: Sendable {
        public var cards: [String: [String: JSONValue]] = [:]
        public var customFields: [String: [JSONValue]] = [:]
        public var requests: [String] = []
        /// Answer the next N card requests with this status (429 comes with Trello's headers).
        public var failNext: (status: Int, count: Int)?
        public var apiKey = "test-api-key"
        public var token = "test-token"
        /// How long each card request takes (a slow Trello).
        public var cardDelay: Duration = .zero
        /// Webhooks by id, as Trello keeps them.
        public var webhooks: [String: Webhook] = [:]
        public var nextID = 1
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
    private let http = HTTPClient(eventLoopGroupProvider: .singleton)

    public var baseURL: String { "http://127.0.0.1:\(server.port)/1" }

    private init(server: SimpleHTTPServer) { self.server = server }

    public static func start() async throws -> FakeTrello {
        let box = NIOLockedValueBox<FakeTrello?>(nil)
        let server = try await SimpleHTTPServer.start(host: "127.0.0.1", port: 0) { request in
            guard let fake = box.withLockedValue({ $0 }) else { return .text(.serviceUnavailable, "starting") }
            let delay = fake.state.withLockedValue { $0.cardDelay }
            if delay > .zero, request.path.hasPrefix("/1/cards/") { try? await Task.sleep(for: delay) }
            if request.path == "/1/webhooks", request.method == .POST { return await fake.createWebhook(request) }
            return fake.handle(request)
        }
        let fake = FakeTrello(server: server)
        box.withLockedValue { $0 = fake }
        return fake
    }

    private let stopped = NIOLockedValueBox(false)

    public func stop() async {
        stopped.withLockedValue { $0 = true }
        await server.stop()
        try? await http.shutdown()
    }

    deinit {
        if !stopped.withLockedValue({ $0 }) { try? http.syncShutdown() }
    }

    public func setCard(_ card: [String: JSONValue]) {
        guard let id = card["id"]?.stringValue else { return }
        state.withLockedValue { $0.cards[id] = card }
    }

    public func setCardDelay(_ delay: Duration) { state.withLockedValue { $0.cardDelay = delay } }

    public func failNextCardRequests(status: Int, count: Int) { state.withLockedValue { $0.failNext = (status, count) } }

    public var cardRequests: Int { state.withLockedValue { $0.requests.filter { $0.hasPrefix("GET /1/cards/") }.count } }

    /// A card as `GET /cards/{id}?fields=all&…` returns it.
    public static func card(
        id: String, listID: String, boardID: String, name: String, desc: String = "", due: String? = nil,
        dueComplete: Bool = false, closed: Bool = false
    ) -> [String: JSONValue] {
        [
            "id": .string(id), "idList": .string(listID), "idBoard": .string(boardID), "name": .string(name),
            "desc": .string(desc), "due": due.map(JSONValue.string) ?? .null, "start": .null, "dueComplete": .bool(dueComplete),
            "closed": .bool(closed), "idLabels": .array([]), "checklists": .array([]), "attachments": .array([]),
            "customFieldItems": .array([]), "pos": .number(16384),
        ]
    }

    /// `POST /1/webhooks`: like Trello, checks auth, then sends HEAD to the callback URL and refuses unless it gets 200.
    func createWebhook(_ request: SimpleHTTPRequest) async -> SimpleHTTPResponse {
        let (key, token) = state.withLockedValue { state in
            state.requests.append("POST /1/webhooks")
            return (state.apiKey, state.token)
        }
        let auth = request.headers.first(name: "authorization") ?? ""
        guard auth.contains("oauth_consumer_key=\"\(key)\"") else { return .text(.unauthorized, "invalid key") }
        guard auth.contains("oauth_token=\"\(token)\"") else { return .text(.unauthorized, "invalid token") }
        guard let body = try? JSONParser.parse(request.body.readableBytesView), let callback = body["callbackURL"]?.stringValue,
              let model = body["idModel"]?.stringValue
        else { return .text(.badRequest, "invalid value for callbackURL") }
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
            state.webhooks[id] = Webhook(id: id, idModel: model, callbackURL: callback, description: body["description"]?.stringValue ?? "")
            return .json(.ok, JSONValue.object([
                "id": .string(id), "idModel": .string(model), "callbackURL": .string(callback), "active": .bool(true),
                "description": .string(body["description"]?.stringValue ?? ""),
            ]).canonicalJSON)
        }
    }

    func handle(_ request: SimpleHTTPRequest) -> SimpleHTTPResponse {
        let path = String(request.path).removingPercentEncoding ?? String(request.path)
        let (failure, key, token) = state.withLockedValue { state -> ((Int, Int)?, String, String) in
            state.requests.append("\(request.method.rawValue) \(path)")
            var failure: (Int, Int)?
            if let f = state.failNext, f.count > 0, path.hasPrefix("/1/cards/") {
                failure = (f.status, f.count)
                state.failNext = f.count > 1 ? (f.status, f.count - 1) : nil
            }
            return (failure, state.apiKey, state.token)
        }
        let auth = request.headers.first(name: "authorization") ?? ""
        guard auth.contains("oauth_consumer_key=\"\(key)\"") else { return .text(.unauthorized, "invalid key") }
        guard auth.contains("oauth_token=\"\(token)\"") else { return .text(.unauthorized, "invalid token") }
        if let (status, _) = failure {
            var response = SimpleHTTPResponse.text(HTTPResponseStatus(statusCode: status), status == 429 ? "API_TOKEN_LIMIT_EXCEEDED" : "Internal error")
            if status == 429 {
                response.headers.add(name: "x-rate-limit-api-token-interval-ms", value: "10000")
                response.headers.add(name: "x-rate-limit-api-token-max", value: "100")
                response.headers.add(name: "x-rate-limit-api-token-remaining", value: "0")
                response.headers.add(name: "retry-after", value: "0")
            }
            return response
        }
        let parts = path.split(separator: "/")
        if parts.count == 3, parts[1] == "cards", request.method == .GET {
            guard let card = state.withLockedValue({ $0.cards[String(parts[2])] }) else { return .text(.notFound, "The requested resource was not found.") }
            return .json(.ok, JSONValue.object(card).canonicalJSON)
        }
        if parts.count == 3, parts[1] == "webhooks", request.method == .DELETE {
            let removed = state.withLockedValue { $0.webhooks.removeValue(forKey: String(parts[2])) }
            return removed == nil ? .text(.notFound, "model not found") : .json(.ok, #"{"_value":null}"#)
        }
        if parts.count == 4, parts[1] == "boards", parts[3] == "customFields", request.method == .GET {
            let fields = state.withLockedValue { $0.customFields[String(parts[2])] } ?? []
            return .json(.ok, JSONValue.array(fields).canonicalJSON)
        }
        return .text(.notFound, "Cannot GET \(path)")
    }
}
