import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRuntime

/// An OpenTelemetry collector on loopback as the processes export to it over OTLP/HTTP with JSON
/// (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`): it answers `POST /v1/traces` as a collector does and keeps every span,
/// with the exporting process's `service.name`. Ids are kept as hex, as a `traceparent` writes them (the JSON carries
/// them in base64, protobuf's form for bytes).
public final class FakeCollector: Sendable {
    public struct Span: Sendable, CustomStringConvertible {
        public var service: String
        public var traceID: String
        public var spanID: String
        /// Empty for a root span.
        public var parentSpanID: String
        public var name: String
        /// OTLP's: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
        public var kind: Int
        public var attributes: [String: String]
        public var links: [(traceID: String, spanID: String, attributes: [String: String])]
        /// 2: error.
        public var statusCode: Int

        public var description: String { "\(service) \(name) kind \(kind) trace \(traceID) span \(spanID) parent \(parentSpanID)" }
    }

    private let server: SimpleHTTPServer
    private let received = NIOLockedValueBox<[Span]>([])
    private let requests = NIOLockedValueBox<[String]>([])

    /// The endpoint for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    public var url: String { "http://127.0.0.1:\(server.port)" }
    public var spans: [Span] { received.withLockedValue { $0 } }
    /// Each request's path and content type, in order.
    public var requestLog: [String] { requests.withLockedValue { $0 } }

    private init(server: SimpleHTTPServer) { self.server = server }

    public static func start() async throws -> FakeCollector {
        let box = NIOLockedValueBox<FakeCollector?>(nil)
        let server = try await SimpleHTTPServer.start(host: "127.0.0.1", port: 0, maxBodySize: 8 << 20) { request in
            guard let collector = box.withLockedValue({ $0 }) else { return .text(.serviceUnavailable, "starting") }
            return collector.serve(request)
        }
        let collector = FakeCollector(server: server)
        box.withLockedValue { $0 = collector }
        return collector
    }

    public func stop() async { await server.stop() }

    func serve(_ request: SimpleHTTPRequest) -> SimpleHTTPResponse {
        let contentType = request.headers.first(name: "content-type") ?? ""
        requests.withLockedValue { $0.append("\(request.method) \(request.path) \(contentType)") }
        guard request.method == .POST, request.path == "/v1/traces" else { return .json(.notFound, #"{"error":"not a traces export"}"#) }
        guard contentType.hasPrefix("application/json"), let body = try? JSONParser.parse(request.body.readableBytesView) else {
            return .json(.badRequest, #"{"error":"only OTLP/HTTP JSON here"}"#)
        }
        var spans: [Span] = []
        for resource in body["resourceSpans"]?.arrayValue ?? [] {
            let service = Self.attributes(resource["resource"]?["attributes"])["service.name"] ?? ""
            for scope in resource["scopeSpans"]?.arrayValue ?? [] {
                for span in scope["spans"]?.arrayValue ?? [] {
                    spans.append(
                        Span(
                            service: service, traceID: Self.hex(span["traceId"]), spanID: Self.hex(span["spanId"]),
                            parentSpanID: Self.hex(span["parentSpanId"]), name: span["name"]?.stringValue ?? "",
                            kind: Self.int(span["kind"]), attributes: Self.attributes(span["attributes"]),
                            links: (span["links"]?.arrayValue ?? []).map { link in
                                (Self.hex(link["traceId"]), Self.hex(link["spanId"]), Self.attributes(link["attributes"]))
                            },
                            statusCode: Self.int(span["status"]?["code"])))
                }
            }
        }
        received.withLockedValue { $0 += spans }
        return .json(.ok, "{}")
    }

    static func hex(_ value: JSONValue?) -> String {
        guard let text = value?.stringValue, let data = Data(base64Encoded: text) else { return "" }
        return data.map { String(format: "%02x", $0) }.joined()
    }

    static func int(_ value: JSONValue?) -> Int {
        switch value {
        case .number(let number)?: Int(number)
        case .string(let text)?: Int(text) ?? 0
        default: 0
        }
    }

    /// OTLP's key/value list as text (numbers and booleans written out).
    static func attributes(_ value: JSONValue?) -> [String: String] {
        var attributes: [String: String] = [:]
        for pair in value?.arrayValue ?? [] {
            guard let key = pair["key"]?.stringValue, let any = pair["value"]?.objectValue, let (_, inner) = any.first else { continue }
            switch inner {
            case .string(let text): attributes[key] = text
            case .number(let number): attributes[key] = number == number.rounded() ? String(Int(number)) : String(number)
            case .bool(let flag): attributes[key] = String(flag)
            default: attributes[key] = "\(inner)"
            }
        }
        return attributes
    }
}
