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
    }

    public let state = NIOLockedValueBox(State())
    private let server: SimpleHTTPServer

    public var baseURL: String { "http://127.0.0.1:\(server.port)/1" }

    private init(server: SimpleHTTPServer) { self.server = server }

    public static func start() async throws -> FakeTrello {
        let box = NIOLockedValueBox<FakeTrello?>(nil)
        let server = try await SimpleHTTPServer.start(host: "127.0.0.1", port: 0) { request in
            guard let fake = box.withLockedValue({ $0 }) else { return .text(.serviceUnavailable, "starting") }
            let delay = fake.state.withLockedValue { $0.cardDelay }
            if delay > .zero, request.path.hasPrefix("/1/cards/") { try? await Task.sleep(for: delay) }
            return fake.handle(request)
        }
        let fake = FakeTrello(server: server)
        box.withLockedValue { $0 = fake }
        return fake
    }

    public func stop() async { await server.stop() }

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
        if parts.count == 4, parts[1] == "boards", parts[3] == "customFields", request.method == .GET {
            let fields = state.withLockedValue { $0.customFields[String(parts[2])] } ?? []
            return .json(.ok, JSONValue.array(fields).canonicalJSON)
        }
        return .text(.notFound, "Cannot GET \(path)")
    }
}
