import AsyncHTTPClient
import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import RoundupCore

public struct TrelloError: Error, Sendable, CustomStringConvertible {
    public var status: Int?
    public var message: String
    /// 429, 5xx, timeouts and lost connections: worth trying again later.
    public var isTransient: Bool
    public var retryAfter: TimeAmount?

    public var description: String {
        if let status { return "trello \(status): \(message)" }
        return "trello: \(message)"
    }
}

/// Trello's REST API, with key+token auth in a header (never in the URL, so never in a log line),
/// timeouts, and retries with exponential backoff and jitter on 429, 5xx and timeouts.
public struct TrelloClient: Sendable {
    public let baseURL: String
    let http: HTTPClient
    let timeout: TimeAmount
    let maxAttempts: Int
    let logger: Logger

    public init(baseURL: String, http: HTTPClient, timeout: TimeAmount = .seconds(10), maxAttempts: Int = 3, logger: Logger) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.http = http
        self.timeout = timeout
        self.maxAttempts = maxAttempts
        self.logger = logger
    }

    /// The full card, or nil when Trello says it no longer exists.
    public func card(id: String, credentials: TrelloCredentialsValue) async throws -> [String: JSONValue]? {
        let path = "/cards/\(Self.escape(id))?fields=all&customFieldItems=true&checklists=all&attachments=true"
        guard let value = try await get(path, credentials: credentials, notFoundIsNil: true) else { return nil }
        guard let object = value.objectValue else { throw TrelloError(status: nil, message: "card \(id) is not a JSON object", isTransient: false) }
        return object
    }

    /// The board's Priority dropdown custom field, if it has one.
    public func priorityField(boardID: String, credentials: TrelloCredentialsValue) async throws -> PriorityField? {
        guard let fields = try await get("/boards/\(Self.escape(boardID))/customFields", credentials: credentials, notFoundIsNil: true)?.arrayValue else {
            return nil
        }
        for field in fields {
            guard field["name"]?.stringValue?.lowercased() == "priority", field["type"]?.stringValue == "list",
                  let id = field["id"]?.stringValue
            else { continue }
            var options: [String: String] = [:]
            for option in field["options"]?.arrayValue ?? [] {
                if let optionID = option["id"]?.stringValue, let text = option["value"]?["text"]?.stringValue {
                    options[optionID] = text
                }
            }
            return PriorityField(fieldID: id, options: options)
        }
        return nil
    }

    /// Registers a webhook. Trello first checks the callback URL with a HEAD request and refuses unless it answers 200.
    /// Returns the webhook's id.
    public func createWebhook(callbackURL: String, modelID: String, description: String, credentials: TrelloCredentialsValue) async throws -> String {
        let body = JSONValue.object([
            "callbackURL": .string(callbackURL), "idModel": .string(modelID), "description": .string(description),
        ])
        let reply = try await send(.POST, "/webhooks", body: body, credentials: credentials)
        guard let id = reply["id"]?.stringValue else {
            throw TrelloError(status: 200, message: "webhook reply has no id", isTransient: false)
        }
        return id
    }

    /// Deletes a webhook; one already gone counts as deleted.
    public func deleteWebhook(id: String, credentials: TrelloCredentialsValue) async throws {
        do {
            _ = try await send(.DELETE, "/webhooks/\(Self.escape(id))", body: nil, credentials: credentials)
        } catch let error as TrelloError where error.status == 404 {
            return
        }
    }

    private func send(_ method: HTTPMethod, _ path: String, body: JSONValue?, credentials: TrelloCredentialsValue) async throws -> JSONValue {
        var attempt = 0
        while true {
            attempt += 1
            var request = HTTPClientRequest(url: baseURL + path)
            request.method = method
            request.headers.add(name: "Authorization", value: credentials.authorizationHeader)
            request.headers.add(name: "Accept", value: "application/json")
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(string: body.canonicalJSON))
            }
            do {
                let response: HTTPClientResponse
                do {
                    response = try await http.execute(request, timeout: timeout, logger: logger)
                } catch {
                    throw TrelloError(status: nil, message: "request failed: \(error)", isTransient: true)
                }
                let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
                let status = Int(response.status.code)
                Self.count(status: status)
                switch status {
                case 200..<300:
                    return (try? JSONParser.parse(Array(text.utf8))) ?? .null
                case 429, 500..<600:
                    throw TrelloError(status: status, message: String(text.prefix(300)), isTransient: true)
                default:
                    throw TrelloError(status: status, message: String(text.prefix(300)), isTransient: false)
                }
            } catch let error as TrelloError where error.isTransient && attempt < maxAttempts {
                let base = 200.0 * pow(2.0, Double(attempt - 1))
                try await Task.sleep(for: .milliseconds(Int(base + Double.random(in: 0...base))))
            }
        }
    }

    func get(_ path: String, credentials: TrelloCredentialsValue, notFoundIsNil: Bool) async throws -> JSONValue? {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await getOnce(path, credentials: credentials, notFoundIsNil: notFoundIsNil)
            } catch let error as TrelloError where error.isTransient && attempt < maxAttempts {
                let base = 200.0 * pow(2.0, Double(attempt - 1))
                let delayMS = error.retryAfter.map { Double($0.nanoseconds) / 1e6 } ?? (base + Double.random(in: 0...base))
                logger.debug("trello request retry", metadata: ["path": "\(path.split(separator: "?")[0])", "attempt": "\(attempt)", "error": "\(error)"])
                try await Task.sleep(for: .milliseconds(Int(min(delayMS, 10_000))))
            }
        }
    }

    private func getOnce(_ path: String, credentials: TrelloCredentialsValue, notFoundIsNil: Bool) async throws -> JSONValue? {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .GET
        request.headers.add(name: "Authorization", value: credentials.authorizationHeader)
        request.headers.add(name: "Accept", value: "application/json")
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: timeout, logger: logger)
        } catch {
            throw TrelloError(status: nil, message: "request failed: \(error)", isTransient: true)
        }
        let body = try await response.body.collect(upTo: 8 << 20)
        let status = Int(response.status.code)
        Self.count(status: status)
        switch status {
        case 200..<300:
            do {
                return try JSONParser.parse(body.readableBytesView)
            } catch {
                throw TrelloError(status: status, message: "response is not JSON", isTransient: false)
            }
        case 404 where notFoundIsNil:
            return nil
        case 429, 500..<600:
            let retryAfter = response.headers.first(name: "retry-after").flatMap(Int.init).map { TimeAmount.seconds(Int64($0)) }
            throw TrelloError(status: status, message: String(buffer: body).prefix(200).description, isTransient: true, retryAfter: retryAfter)
        default:
            throw TrelloError(status: status, message: String(buffer: body).prefix(200).description, isTransient: false)
        }
    }

    /// `roundup_trello_requests_total{status}` (status class: 2xx, 4xx, 429, 5xx).
    static func count(status: Int) {
        let label = status == 429 ? "429" : "\(status / 100)xx"
        Counter(label: "roundup_trello_requests_total", dimensions: [("status", label)]).increment()
    }

    /// Percent-encodes an id for a path segment (RFC 3986 unreserved characters stay as they are).
    static func escape(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")) ?? id
    }
}

/// Key and token, sent as Trello's OAuth-style Authorization header.
public struct TrelloCredentialsValue: Sendable {
    public var apiKey: String
    public var token: String
    public init(apiKey: String, token: String) {
        self.apiKey = apiKey
        self.token = token
    }
    var authorizationHeader: String { "OAuth oauth_consumer_key=\"\(apiKey)\", oauth_token=\"\(token)\"" }
}
