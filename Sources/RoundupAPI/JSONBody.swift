import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import RoundupCore

/// Reading request bodies: content type, size, JSON, and typed fields with errors that name the field.
struct JSONBody {
    var object: [String: JSONValue]

    /// The JSON object in the request's body. `optional` allows an empty body (then an empty object).
    static func containsNUL(_ value: JSONValue) -> Bool {
        switch value {
        case .string(let text): return text.utf8.contains(0)
        case .array(let items): return items.contains(where: containsNUL)
        case .object(let members): return members.contains { $0.key.utf8.contains(0) || containsNUL($0.value) }
        default: return false
        }
    }

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
        // A NUL character (\u0000) fits no identifier or name here, and PostgreSQL's text columns cannot hold one.
        guard !Self.containsNUL(value) else { throw APIError.invalidJSON("strings must not contain the NUL character (\\u0000)") }
        guard case .object(let object) = value else { throw APIError.invalidJSON("the body must be a JSON object") }
        return JSONBody(object: object)
    }

    /// Rejects fields the endpoint does not know, so a typo is not silently ignored.
    func allowOnly(_ names: Set<String>) throws {
        if let unknown = object.keys.sorted().first(where: { !names.contains($0) }) {
            throw APIError.unprocessable("unknown field \"\(unknown)\"; allowed: \(names.sorted().joined(separator: ", "))")
        }
    }

    func string(_ name: String, required: Bool, maxLength: Int = 1000) throws -> String? {
        guard let value = object[name], value != .null else {
            if required { throw APIError.unprocessable("\(name) is required") }
            return nil
        }
        guard case .string(let text) = value else { throw APIError.badRequest("\(name) must be a string") }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty { throw APIError.unprocessable("\(name) must not be empty") }
        if trimmed.count > maxLength { throw APIError.unprocessable("\(name) is longer than \(maxLength) characters") }
        return trimmed
    }

    /// A field that must be there, non-optional by construction.
    func requiredString(_ name: String, maxLength: Int = 1000) throws -> String {
        guard let value = try string(name, required: true, maxLength: maxLength) else { throw APIError.unprocessable("\(name) is required") }
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
