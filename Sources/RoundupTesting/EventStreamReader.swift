import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
public import NIOHTTP1

/// A Server-Sent Events client for tests: opens a `text/event-stream` request and keeps every event it reads, as
/// an EventSource would parse them (fields `id`, `event`, `data`; `:` comments; a blank line ends an event).
public final class EventStreamReader: Sendable {
    public struct Event: Sendable, Equatable {
        public var id: String?
        public var event: String?
        public var data: String
        /// When the reader parsed it.
        public var receivedAt: ContinuousClock.Instant
    }

    private struct State {
        var events: [Event] = []
        var comments: [String] = []
        var ended = false
        var error: String?
    }

    public let status: HTTPResponseStatus
    public let headers: HTTPHeaders
    /// The whole body of a response that is no stream (an error), else empty.
    public let errorBody: String
    private let state = NIOLockedValueBox(State())
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)

    private let http: HTTPClient?

    private init(status: HTTPResponseStatus, headers: HTTPHeaders, errorBody: String, http: HTTPClient?) {
        self.status = status
        self.headers = headers
        self.errorBody = errorBody
        self.http = http
    }

    /// Opens `url` with these headers, on a client of its own (so `close()` surely closes the connection); a
    /// response other than 200 is read whole into `errorBody`.
    public static func open(url: String, headers: [String: String] = [:]) async throws -> EventStreamReader {
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "accept", value: "text/event-stream")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: .hours(1))
        } catch {
            try? await http.shutdown()
            throw error
        }
        guard response.status == .ok else {
            let body = try? await response.body.collect(upTo: 1 << 20)
            try? await http.shutdown()
            return EventStreamReader(status: response.status, headers: response.headers, errorBody: body.map { String(buffer: $0) } ?? "", http: nil)
        }
        let reader = EventStreamReader(status: response.status, headers: response.headers, errorBody: "", http: http)
        let body = response.body
        reader.task.withLockedValue {
            $0 = Task {
                var parser = Parser()
                do {
                    for try await buffer in body {
                        for item in parser.feed(buffer.readableBytesView) {
                            reader.state.withLockedValue { state in
                                switch item {
                                case .event(let event): state.events.append(event)
                                case .comment(let text): state.comments.append(text)
                                }
                            }
                        }
                    }
                } catch {
                    reader.state.withLockedValue { $0.error = "\(error)" }
                }
                reader.state.withLockedValue { $0.ended = true }
            }
        }
        return reader
    }

    /// Every event read so far, in order.
    public var events: [Event] { state.withLockedValue { $0.events } }
    /// Every comment line read so far (without its `:`).
    public var comments: [String] { state.withLockedValue { $0.comments } }
    /// Whether the server ended the stream (or the connection broke).
    public var ended: Bool { state.withLockedValue { $0.ended } }
    /// Why reading ended, when it was not the server ending the response (the connection broke, or `close()`).
    public var failure: String? { state.withLockedValue { $0.error } }

    /// Stops reading and closes the connection.
    public func close() async {
        let task = self.task.withLockedValue { $0 }
        task?.cancel()
        try? await http?.shutdown()
        await task?.value
    }

    enum Item {
        case event(Event)
        case comment(String)
    }

    /// The line protocol of `text/event-stream`, fed with chunks as they arrive.
    struct Parser {
        var line: [UInt8] = []
        var id: String?
        var event: String?
        var data: [String] = []

        mutating func feed(_ bytes: some Sequence<UInt8>) -> [Item] {
            var items: [Item] = []
            for byte in bytes {
                if byte == UInt8(ascii: "\n") {
                    if let item = take(String(decoding: line, as: UTF8.self)) { items.append(item) }
                    line.removeAll(keepingCapacity: true)
                } else if byte != UInt8(ascii: "\r") {
                    line.append(byte)
                }
            }
            return items
        }

        private mutating func take(_ text: String) -> Item? {
            if text.isEmpty {
                defer {
                    event = nil
                    data = []
                }
                guard !data.isEmpty else { return nil }
                return .event(Event(id: id, event: event, data: data.joined(separator: "\n"), receivedAt: .now))
            }
            if text.hasPrefix(":") { return .comment(String(text.dropFirst()).trimmingCharacters(in: .whitespaces)) }
            let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            var value = parts.count > 1 ? String(parts[1]) : ""
            if value.hasPrefix(" ") { value.removeFirst() }
            switch name {
            case "id": id = value
            case "event": event = value
            case "data": data.append(value)
            default: break
            }
            return nil
        }
    }
}
