import Foundation
public import Logging
import RoundupCore

/// Sets up logging once per process (executables only; tests never call it).
public enum RoundupLogging {
    /// `metadataProvider`: metadata every line gets (the current span's trace and span ids when tracing is on).
    public static func bootstrap(level: Logger.Level, format: RoundupLogHandler.Format = .text, metadataProvider: Logger.MetadataProvider? = nil) {
        LoggingSystem.bootstrap(
            { label, provider in
                var handler = RoundupLogHandler(label: label, level: level, format: format)
                handler.metadataProvider = provider
                return handler
            }, metadataProvider: metadataProvider)
    }
}

/// One line per record on standard error, as text (control characters escaped) or as one JSON object
/// (`LOG_FORMAT=json`), with secrets redacted:
/// a metadata value is replaced when its key names a secret (token, secret, password, authorization, api key…), and any
/// `Bearer …` credential is cut from messages and values.
public struct RoundupLogHandler: LogHandler {
    public enum Format: String, Sendable {
        case text, json
    }

    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    public var metadataProvider: Logger.MetadataProvider?
    let label: String
    let format: Format

    public init(label: String, level: Logger.Level, format: Format) {
        self.label = label
        self.logLevel = level
        self.format = format
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    static let secretKeyWords = ["secret", "token", "password", "authorization", "api_key", "apikey", "credential", "bootstrap"]

    /// Whether a metadata key names a secret.
    public static func isSecretKey(_ key: String) -> Bool {
        let lower = key.lowercased()
        return secretKeyWords.contains { lower.contains($0) }
    }

    /// Cuts `Bearer <credential>`, `oauth_token="…"`-style values and Trello's `key=`/`token=` query parameters out of
    /// free text.
    public static func redact(_ text: String) -> String {
        var out = text
        for pattern in [#"(?i)bearer\s+[A-Za-z0-9._~+/=-]+"#, #"(?i)(oauth_token|oauth_consumer_key)="[^"]*""#] {
            out = out.replacingOccurrences(of: pattern, with: "[redacted]", options: .regularExpression)
        }
        return out.replacingOccurrences(of: #"(?i)([?&](key|token)=)[^&\s"']+"#, with: "$1[redacted]", options: .regularExpression)
    }

    static func render(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let s): return redact(s)
        case .stringConvertible(let c): return redact(c.description)
        case .array(let a): return "[" + a.map(render).joined(separator: ", ") + "]"
        case .dictionary(let d):
            return "["
                + d.sorted { $0.key < $1.key }.map { "\($0.key): \(isSecretKey($0.key) ? "[redacted]" : render($0.value))" }.joined(separator: ", ")
                + "]"
        }
    }

    public func log(event: LogEvent) {
        FileHandle.standardError.write(Data(line(for: event).utf8))
    }

    /// The line `log(event:)` writes, newline included.
    public func line(for event: LogEvent) -> String {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        let fields = merged.sorted { $0.key < $1.key }.map { key, value in (key, Self.isSecretKey(key) ? "[redacted]" : Self.render(value)) }
        let timestamp = Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true))
        let message = Self.redact(event.message.description)
        switch format {
        case .text:
            // Control characters written out (`TerminalText.escaped`): a value with a newline cannot forge a record.
            let meta = fields.map { "\(TerminalText.escaped($0.0))=\(TerminalText.escaped($0.1))" }.joined(separator: " ")
            return "\(timestamp) \(event.level) \(TerminalText.escaped(label)): \(meta.isEmpty ? "" : meta + " ")\(TerminalText.escaped(message))\n"
        case .json:
            var object: [String: JSONValue] = [
                "ts": .string(timestamp), "level": .string(event.level.rawValue), "label": .string(label), "msg": .string(message),
            ]
            for (key, value) in fields where object[key] == nil { object[key] = .string(value) }
            // Valid JSON still; DEL and C1 escaped too, for whoever reads it on a terminal.
            return TerminalText.jsonSafe(JSONValue.object(object).canonicalJSON) + "\n"
        }
    }
}
