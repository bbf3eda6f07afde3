import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import RoundupCore

/// Reading request bodies: content type, size, JSON, and typed fields with errors that name the field.
struct JSONBody {
    var object: [String: JSONValue]

    /// What the body holds that no field here can take, found in one walk: a NUL character (no identifier or name
    /// holds one, and PostgreSQL's text columns cannot), or a number no double holds (`1e400` is valid JSON; read as
    /// infinity it could be neither compared, stored as JSON nor written to Trello).
    enum Unfit: Equatable {
        case nul
        /// The path of the number (`items[2].fields.due_reminder_minutes`).
        case nonFinite(path: String)
    }

    static func firstUnfit(_ value: JSONValue) -> Unfit? {
        var steps: [String] = []
        guard let nul = unfit(in: value, steps: &steps) else { return nil }
        if nul { return .nul }
        // The path, built only for the value found (the walk itself allocates nothing); `steps` is innermost first.
        var path = ""
        for step in steps.reversed() { path += step.hasPrefix("[") || path.isEmpty ? step : ".\(step)" }
        return .nonFinite(path: path.isEmpty ? "the body" : path)
    }

    /// Whether the first unfit value is a NUL (true) or a number (false), nil when there is none; `steps` gets the
    /// path to the number, innermost first.
    private static func unfit(in value: JSONValue, steps: inout [String]) -> Bool? {
        switch value {
        case .string(let text): return text.utf8.contains(0) ? true : nil
        case .number(let number): return number.isFinite ? nil : false
        case .array(let items):
            for (index, item) in items.enumerated() {
                if let found = unfit(in: item, steps: &steps) {
                    steps.append("[\(index)]")
                    return found
                }
            }
            return nil
        case .object(let members):
            for (key, member) in members {
                if key.utf8.contains(0) { return true }
                if let found = unfit(in: member, steps: &steps) {
                    steps.append(key)
                    return found
                }
            }
            return nil
        default: return nil
        }
    }

    /// The JSON object in the request's body. `optional` allows an empty body (then an empty object).
    static func read(_ request: Request, context: some RequestContext, optional: Bool = false) async throws -> JSONBody {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: context.maxUploadSize)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, "payload_too_large", "the body is over 1 MiB")
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, "payload_too_large", "the body is over 1 MiB")
        }
        if buffer.readableBytes == 0 {
            if optional { return JSONBody(object: [:]) }
            throw APIError.invalidJSON("the body is empty; send a JSON object")
        }
        // application/json or an application/…+json type, with parameters (charset) or not; not application/jsonp.
        let type = (request.headers[.contentType] ?? "").split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        guard type == "application/json" || type.hasPrefix("application/") && type.hasSuffix("+json") else {
            throw APIError(.unsupportedMediaType, "unsupported_media_type", "send the body as application/json")
        }
        // JSON is UTF-8: bad bytes are refused, not turned into U+FFFD and stored.
        guard buffer.withUnsafeReadableBytes({ String(validating: $0, as: UTF8.self) }) != nil else {
            throw APIError.invalidJSON("the body is not valid UTF-8")
        }
        let value: JSONValue
        do {
            value = try buffer.withUnsafeReadableBytes { try JSONParser.parse($0) }
        } catch {
            throw APIError.invalidJSON("the body is not valid JSON: \(error)")
        }
        switch Self.firstUnfit(value) {
        case .nul?: throw APIError.invalidJSON("strings must not contain the NUL character (\\u0000)")
        case .nonFinite(let path)?:
            throw APIError.unprocessable("\(path) is a number out of range: numbers must be finite and within a double's range (about ±1.8e308)")
        case nil: break
        }
        guard case .object(let object) = value else { throw APIError.invalidJSON("the body must be a JSON object") }
        return JSONBody(object: object)
    }

    /// Rejects fields the endpoint does not know, so a typo is not silently ignored.
    func allowOnly(_ names: Set<String>) throws {
        if let unknown = object.keys.sorted().first(where: { !names.contains($0) }) {
            throw APIError.unprocessable("unknown field \"\(unknown)\"; allowed: \(names.sorted().joined(separator: ", "))")
        }
    }

    /// A string field, trimmed: at most `maxLength` characters (grapheme clusters, as people count them) and at most
    /// `maxBytes` bytes of UTF-8. A character has no bound of its own (any number of combining marks make one), so the
    /// bytes bound what is stored, indexed and put in keys; by default 4 a character, which no text whose characters are
    /// each one code point can pass.
    func string(_ name: String, required: Bool, maxLength: Int = 1000, maxBytes: Int? = nil) throws -> String? {
        guard let value = object[name], value != .null else {
            if required { throw APIError.unprocessable("\(name) is required") }
            return nil
        }
        guard case .string(let text) = value else { throw APIError.badRequest("\(name) must be a string") }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty { throw APIError.unprocessable("\(name) must not be empty") }
        try Self.checkLength(trimmed, name: name, maxLength: maxLength, maxBytes: maxBytes)
        return trimmed
    }

    /// Refuses `text` over `maxLength` characters or `maxBytes` bytes of UTF-8 (4 a character when nil), naming the
    /// field and both bounds. The bytes are counted first: counting characters walks the whole text.
    static func checkLength(_ text: String, name: String, maxLength: Int, maxBytes: Int? = nil) throws {
        let byteLimit = maxBytes ?? maxLength * 4
        if text.utf8.count > byteLimit {
            throw APIError.unprocessable(
                "\(name) is longer than \(byteLimit) bytes of UTF-8 (at most \(maxLength) characters and \(byteLimit) bytes)")
        }
        if text.count > maxLength {
            throw APIError.unprocessable("\(name) is longer than \(maxLength) characters (at most \(maxLength) characters and \(byteLimit) bytes)")
        }
    }

    /// A field that must be there, non-optional by construction.
    func requiredString(_ name: String, maxLength: Int = 1000, maxBytes: Int? = nil) throws -> String {
        guard let value = try string(name, required: true, maxLength: maxLength, maxBytes: maxBytes) else {
            throw APIError.unprocessable("\(name) is required")
        }
        return value
    }

    func requiredOneOf(_ name: String, _ allowed: [String]) throws -> String {
        guard let value = try oneOf(name, allowed, required: true) else { throw APIError.unprocessable("\(name) is required") }
        return value
    }

    /// A credential or secret: printable ASCII without spaces (it travels in an HTTP header or an HMAC key), never echoed.
    func credential(_ name: String, required: Bool, maxLength: Int) throws -> String? {
        guard let value = try string(name, required: required, maxLength: maxLength) else { return nil }
        guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw APIError.unprocessable("\(name) must be printable ASCII without spaces")
        }
        return value
    }

    /// One of a domain enum's values, named in the order the enum declares them when the value is none.
    func oneOf<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type, required: Bool) throws -> Value?
    where Value.RawValue == String {
        guard let text = try oneOf(name, Value.allCases.map(\.rawValue), required: required) else { return nil }
        return Value(rawValue: text)
    }

    func requiredOneOf<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type) throws -> Value where Value.RawValue == String {
        guard let value = try oneOf(name, type, required: true) else { throw APIError.unprocessable("\(name) is required") }
        return value
    }

    func oneOf(_ name: String, _ allowed: [String], required: Bool) throws -> String? {
        guard let value = try string(name, required: required) else { return nil }
        guard allowed.contains(value) else { throw APIError.unprocessable("\(name) must be one of \(allowed.joined(separator: ", "))") }
        return value
    }

    static func integer(_ value: JSONValue, name: String) throws -> Int64 {
        guard case .number(let n) = value else { throw APIError.badRequest("\(name) must be an integer") }
        guard n.rounded() == n, abs(n) < 9e15 else { throw APIError.badRequest("\(name) must be an integer") }
        return Int64(n)
    }
}
