import Foundation
import Logging
import NIOConcurrencyHelpers
import OTel
public import RoundupCore
import ServiceLifecycle
public import Tracing

/// OpenTelemetry traces for a roundup process, exported over OTLP/HTTP by swift-otel and configured by the standard
/// `OTEL_*` variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_PROTOCOL` = `http/protobuf` or `http/json`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_TRACES_SAMPLER`,
/// `OTEL_SDK_DISABLED`…). Off unless an endpoint is configured: then no tracer exists, and the code that would trace
/// does nothing more than look at a nil. `service.name` is the executable's name (`roundup-worker`…) unless
/// `OTEL_SERVICE_NAME` says otherwise. Only traces: metrics stay Prometheus's (`/metrics`), logs stay lines on
/// standard error, each carrying `trace_id` and `span_id` when written inside a span.
public enum RoundupTracing {
    /// The process's tracer; nil when tracing is off.
    public static var tracer: (any Tracer)? { state.withLockedValue { $0.tracer } }
    /// The exporter's services (batching, export), run with the process's other services and stopped last, so the
    /// spans of a shutdown are exported too; nil when tracing is off.
    static var service: (any Service)? { state.withLockedValue { $0.service } }

    private struct State {
        var tracer: (any Tracer)?
        var service: (any Service)?
    }
    private static let state = NIOLockedValueBox(State())

    /// Whether the process's environment turns tracing on.
    public static func isConfigured() -> Bool { isConfigured(ProcessInfo.processInfo.environment) }

    /// Whether `environment` turns tracing on: an OTLP endpoint, and the SDK not disabled.
    public static func isConfigured(_ environment: [String: String]) -> Bool {
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return false }
        if environment["OTEL_TRACES_EXPORTER"]?.lowercased() == "none" { return false }
        return [environment["OTEL_EXPORTER_OTLP_ENDPOINT"], environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]].contains { !($0 ?? "").isEmpty }
    }

    /// The metadata provider that puts the current span's `trace_id` and `span_id` on every log line.
    static var loggingMetadataProvider: Logger.MetadataProvider {
        var configuration = OTel.Configuration.LoggingMetadataProviderConfiguration.default
        configuration.traceIDKey = "trace_id"
        configuration.spanIDKey = "span_id"
        configuration.traceFlagsKey = "trace_flags"
        return OTel.makeLoggingMetadataProvider(configuration: configuration)
    }

    /// Makes the tracer (when configured) and makes it the process's (`InstrumentationSystem`); once per process.
    static func bootstrap(serviceName: String, logger: Logger) throws {
        guard isConfigured() else { return }
        var configuration = OTel.Configuration.default
        configuration.serviceName = serviceName
        configuration.diagnosticLogger = .custom(Logger(label: "roundup.otel"))
        // Only traces here: the metrics and logs backends are never made.
        configuration.metrics.enabled = false
        configuration.logs.enabled = false
        let (tracer, service) = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(tracer)
        state.withLockedValue { $0 = State(tracer: tracer, service: service) }
        logger.info("tracing on", metadata: ["service": "\(serviceName)"])
    }
}

/// A stream entry's trace fields as a carrier of the W3C headers.
struct TraceHeadersCarrier: Injector, Extractor {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}

extension Tracer {
    /// The W3C headers of `context` (its span), for a message to carry; nil when it has no span.
    public func traceHeaders(of context: ServiceContext) -> TraceHeaders? {
        var headers: [String: String] = [:]
        inject(context, into: &headers, using: TraceHeadersCarrier())
        return TraceHeaders(
            traceparent: headers[TraceHeaders.Field.traceparent.rawValue], tracestate: headers[TraceHeaders.Field.tracestate.rawValue])
    }

    /// The context a message's headers name (as a parent or a link target).
    public func context(of headers: TraceHeaders) -> ServiceContext {
        var context = ServiceContext.topLevel
        extract(headers.headers, into: &context, using: TraceHeadersCarrier())
        return context
    }
}

extension RoundupTracing {
    /// Runs `operation` in a child span of the current trace's span (a worker's batch, a job); outside a trace (tracing
    /// off, or work no trace covers) it only runs `operation`. An error thrown is recorded on the span.
    public static func withChildSpan<T>(
        _ name: String, ofKind kind: SpanKind = .internal, attributes: SpanAttributes = [:], _ operation: () async throws -> T
    ) async rethrows -> T {
        guard let parent = ServiceContext.current else { return try await operation() }
        return try await run(InstrumentationSystem.tracer.startSpan(name, context: parent, ofKind: kind), attributes: attributes, operation)
    }

    /// Runs `operation` in a new root span of `kind` linked to each of `links` (the messages it handles: a push request,
    /// change announcements), its children within; with tracing off it only runs `operation`.
    public static func withLinkedSpan<T>(
        _ name: String, ofKind kind: SpanKind, links: [TraceHeaders], attributes: SpanAttributes = [:], _ operation: () async throws -> T
    ) async rethrows -> T {
        guard let tracer else { return try await operation() }
        let span = tracer.startSpan(name, context: .topLevel, ofKind: kind)
        for link in links { span.addLink(SpanLink(context: tracer.context(of: link), attributes: [:])) }
        return try await run(span, attributes: attributes, operation)
    }

    /// Runs `operation` in a span of `kind` that continues `parent`'s trace (a message whose sender waits on it: an
    /// app's sync and its job), or starts one when there is none; with tracing off it only runs `operation`.
    public static func withSpan<T>(
        _ name: String, ofKind kind: SpanKind, continuing parent: TraceHeaders?, attributes: SpanAttributes = [:],
        _ operation: () async throws -> T
    ) async rethrows -> T {
        guard let tracer else { return try await operation() }
        let span = tracer.startSpan(name, context: parent.map { tracer.context(of: $0) } ?? .topLevel, ofKind: kind)
        return try await run(span, attributes: attributes, operation)
    }

    /// `operation` with `span` current, an error it throws recorded, and the span ended.
    private static func run<T>(_ span: any Span, attributes: SpanAttributes, _ operation: () async throws -> T) async rethrows -> T {
        defer { span.end() }
        span.attributes = attributes
        do {
            return try await ServiceContext.withValue(span.context) { try await operation() }
        } catch {
            span.attributes["error.type"] = "\(type(of: error))"
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }
}

extension SpanAttributes {
    /// A consumer's attributes for a message of one of our streams (messaging conventions: the system is Redis).
    public static func processing(_ destination: String, messageID: String? = nil) -> SpanAttributes {
        var attributes = SpanAttributes()
        attributes["messaging.system"] = "redis"
        attributes["messaging.operation.type"] = "process"
        attributes["messaging.destination.name"] = destination
        if let messageID { attributes["messaging.message.id"] = messageID }
        return attributes
    }
}
