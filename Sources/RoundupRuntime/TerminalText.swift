/// Text from outside (list names, Trello's error messages, ids in a request) on its way to a log line or a terminal.
/// A raw newline forges a log line of its own; an escape sequence recolours, retitles or rewrites an operator's terminal.
public enum TerminalText {
    /// Whether a scalar controls rather than prints: C0, DEL, C1, and the line and paragraph separators.
    static func isControl(_ value: UInt32) -> Bool {
        value < 0x20 || (0x7F...0x9F).contains(value) || value == 0x2028 || value == 0x2029
    }

    /// Bidirectional overrides and isolates: they reorder what a terminal shows (a name that reads as something else).
    static func isBidiControl(_ value: UInt32) -> Bool {
        (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value) || value == 0x200E || value == 0x200F
    }

    /// For the text log format: every control character written out, so one record stays one line and a terminal
    /// `tail`ing the log runs nothing. `\n`, `\r` and `\t` read as such; the others as `\u{1B}`-style escapes.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { isControl($0.value) }) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x0A: out.append(contentsOf: #"\n"#.unicodeScalars)
            case 0x0D: out.append(contentsOf: #"\r"#.unicodeScalars)
            case 0x09: out.append(contentsOf: #"\t"#.unicodeScalars)
            case let value where isControl(value): out.append(contentsOf: "\\u{\(hex(value))}".unicodeScalars)
            default: out.append(scalar)
            }
        }
        return String(out)
    }

    /// For JSON text (`JSONValue.canonicalJSON` already escapes C0): DEL, C1 and the line separators as `\u` escapes
    /// too. Outside strings JSON text holds only ASCII punctuation, digits and letters, so this changes only string
    /// contents, and what they decode to stays the same.
    public static func jsonSafe(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: { isControl($0.value) }) else { return json }
        var out = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if isControl(scalar.value) {
                let digits = hex(scalar.value)
                out.append(contentsOf: ("\\u" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits.lowercased()).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// For a name printed to an operator's terminal: terminal escape sequences (CSI, OSC, DCS, SOS, PM, APC, and
    /// two-character ESC sequences) removed whole, line breaks and tabs turned into spaces, every other control and
    /// bidirectional override dropped.
    public static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { isControl($0.value) || isBidiControl($0.value) }) else { return text }
        let scalars = Array(text.unicodeScalars)
        var out = String.UnicodeScalarView()
        var i = 0
        /// Skips to the end of a control string (OSC, DCS…): BEL, ST (`ESC \`) or C1 ST, or the end of the text.
        func skipControlString() {
            while i < scalars.count {
                let value = scalars[i].value
                i += 1
                if value == 0x07 || value == 0x9C { return }
                if value == 0x1B, i < scalars.count, scalars[i] == "\\" {
                    i += 1
                    return
                }
            }
        }
        /// Skips a CSI sequence's parameters and intermediates, and its final byte.
        func skipCSI() {
            while i < scalars.count, (0x20...0x3F).contains(scalars[i].value) { i += 1 }
            if i < scalars.count, (0x40...0x7E).contains(scalars[i].value) { i += 1 }
        }
        while i < scalars.count {
            let scalar = scalars[i]
            let value = scalar.value
            i += 1
            switch value {
            case 0x1B:
                guard i < scalars.count else { break }
                let next = scalars[i].value
                i += 1
                switch next {
                case 0x5B: skipCSI()  // ESC [
                case 0x5D, 0x50, 0x58, 0x5E, 0x5F: skipControlString()  // ESC ] P X ^ _
                case 0x20...0x2F:  // ESC, intermediates, final
                    while i < scalars.count, (0x20...0x2F).contains(scalars[i].value) { i += 1 }
                    if i < scalars.count, (0x30...0x7E).contains(scalars[i].value) { i += 1 }
                case 0x30...0x7E: break  // ESC and one final character
                default: i -= 1  // a lone ESC: the next character is text
                }
            case 0x9B: skipCSI()
            case 0x9D, 0x90, 0x98, 0x9E, 0x9F: skipControlString()
            case 0x0A, 0x0D, 0x09, 0x2028, 0x2029: out.append(" ")
            case let v where isControl(v) || isBidiControl(v): break
            default: out.append(scalar)
            }
        }
        return String(out)
    }

    private static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return digits.count < 2 ? "0" + digits : digits
    }
}
