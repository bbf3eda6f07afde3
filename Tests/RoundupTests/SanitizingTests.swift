import Foundation
import Logging
import RoundupCore
import RoundupRuntime
import RoundupStore
import RoundupTesting
import Testing

/// Text from outside on its way to a log line or a terminal: a newline cannot forge a log record, an escape sequence
/// cannot drive the operator's terminal.
@Suite struct SanitizingTests {
    /// Every control character: C0, DEL, C1, and the line and paragraph separators.
    static let controls: [Unicode.Scalar] = (Array(0x00...0x1F) + Array(0x7F...0x9F) + [0x2028, 0x2029]).compactMap { Unicode.Scalar(UInt32($0)) }

    static func hasControl(_ text: some StringProtocol) -> Bool {
        text.unicodeScalars.contains { Self.controls.contains($0) }
    }

    static func event(_ message: String, _ metadata: Logger.Metadata) -> LogEvent {
        LogEvent(level: .warning, message: "\(message)", metadata: metadata, source: "test", file: #fileID, function: #function, line: #line)
    }

    @Test func controlCharactersAreWrittenOutInTextLogs() {
        #expect(TerminalText.escaped("line one\nline two") == #"line one\nline two"#)
        #expect(TerminalText.escaped("a\r\tb") == #"a\r\tb"#)
        #expect(TerminalText.escaped("\u{1B}[31mred\u{7F}\u{9B}\u{0}\u{2028}") == #"\u{1B}[31mred\u{7F}\u{9B}\u{00}\u{2028}"#)
        // Printable text, accents and emoji included, passes unchanged.
        #expect(TerminalText.escaped("Groceries – café 🛒 \\ \"quoted\"") == "Groceries – café 🛒 \\ \"quoted\"")
        for scalar in Self.controls {
            #expect(!Self.hasControl(TerminalText.escaped("x" + String(Character(scalar)) + "y")), "U+\(String(scalar.value, radix: 16))")
        }
    }

    @Test func aTextLogRecordStaysOneLineWhateverItCarries() {
        let handler = RoundupLogHandler(label: "roundup.test", level: .debug, format: .text)
        let forged = "2026-01-01T00:00:00.000Z error roundup.api: account=victim deleted"
        let line = handler.line(for: Self.event("card \nfailed", ["list_name": "Groceries\n\(forged)", "title": "\u{1B}]0;pwned\u{07}\u{1B}[2J"]))
        #expect(line.hasSuffix("\n"))
        #expect(!Self.hasControl(line.dropLast()), "\(line)")
        #expect(line.contains(#"list_name=Groceries\n2026-01-01"#))
        #expect(line.contains(#"title=\u{1B}]0;pwned\u{07}\u{1B}[2J"#))
        #expect(line.contains(#"card \nfailed"#))
        // Redaction still applies.
        #expect(!handler.line(for: Self.event("sent", ["trello_token": "abc\n"])).contains("abc"))
    }

    @Test func aJSONLogRecordStaysValidJSONOnOneLine() throws {
        let handler = RoundupLogHandler(label: "roundup.test", level: .debug, format: .json)
        let message = "card \nfailed \u{1B}[31m\u{7F}\u{9B}\u{85}\u{2028}"
        let value = "Groceries\r\n\u{0}\u{9D}0;x\u{9C}"
        let line = handler.line(for: Self.event(message, ["list_name": .string(value)]))
        #expect(line.hasSuffix("\n"))
        #expect(!Self.hasControl(line.dropLast()), "\(line)")
        let object = try JSONParser.parse(Array(line.dropLast().utf8))
        #expect(object["msg"] == .string(message))
        #expect(object["list_name"] == .string(value))
        #expect(object["level"] == "warning")
        // The same for Foundation's decoder: the escapes are standard JSON.
        let decoded = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(decoded?["msg"] as? String == message)
    }

    @Test func namesLoseTheirTerminalEscapesBeforeTheyArePrinted() {
        let cases: [(String, String)] = [
            ("Groceries", "Groceries"),
            ("Groceries – café 🛒", "Groceries – café 🛒"),
            ("\u{1B}[31mRed\u{1B}[0m list", "Red list"),  // SGR colours
            ("\u{1B}[2J\u{1B}[HClean", "Clean"),  // clear screen, cursor home
            ("\u{1B}]0;pwned\u{07}Title", "Title"),  // OSC window title, BEL-terminated
            ("\u{1B}]8;;http://evil.example\u{1B}\\link\u{1B}]8;;\u{1B}\\", "link"),  // OSC 8 hyperlink, ST-terminated
            ("\u{1B}P1$r0m\u{1B}\\after", "after"),  // DCS
            ("\u{9B}31mC1\u{9D}0;t\u{9C}!", "C1!"),  // C1 CSI and OSC
            ("\u{1B}(0box\u{1B}(B", "box"),  // character set designation
            ("\u{1B}7save\u{1B}8", "save"),  // two-character sequences
            ("a\nb\r\nc\td", "a b  c d"),
            ("nul\u{0}del\u{7F}bell\u{07}", "nuldelbell"),
            ("abc\u{202E}fed\u{202C}", "abcfed"),  // bidirectional override
            ("trailing escape \u{1B}", "trailing escape "),
            ("\u{1B}]0;never terminated", ""),
        ]
        for (raw, expected) in cases {
            let shown = TerminalText.printable(raw)
            #expect(shown == expected, "\(raw.debugDescription)")
            #expect(!Self.hasControl(shown))
        }
        for scalar in Self.controls {
            #expect(!Self.hasControl(TerminalText.printable("x" + String(Character(scalar)) + "y")), "U+\(String(scalar.value, radix: 16))")
        }
    }

    @Test func jsonTextKeepsItsMeaningWithoutRawControls() throws {
        let value = JSONValue.object(["name": .string("a\u{7F}b\u{9B}c\u{2028}d\ne"), "n": .number(1)])
        let text = TerminalText.jsonSafe(value.canonicalJSON)
        #expect(!Self.hasControl(text))
        #expect(text.contains(#"\u007f"#) && text.contains(#"\u009b"#) && text.contains(#"\u2028"#))
        #expect(try JSONParser.parse(Array(text.utf8)) == value)
        #expect(TerminalText.jsonSafe(#"{"a":"plain"}"#) == #"{"a":"plain"}"#)
    }

    /// The real `roundupctl lists` on a list whose name carries escape sequences.
    @Test func roundupctlListsPrintsNamesWithoutTerminalEscapes() async throws {
        let stack = try await Stack()
        let store = try await stack.store()
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)
        _ = try await store.createSyncList(
            accountID: account, name: "\u{1B}]0;owned\u{07}\u{1B}[2JGroceries\n\u{9B}31mfake line", trelloBoardID: "B1", trelloListID: "L1")
        for arguments in [["lists"], ["lists", "--json"]] {
            let process = try ManagedProcess(
                name: "ctl-\(arguments.count)", executable: TestSupport.binDirectory.appendingPathComponent("roundupctl"), arguments: arguments,
                environment: stack.environment, logDirectory: stack.directory)
            #expect(await process.wait(timeout: .seconds(30)) == 0, "\(process.output)")
            let output = process.output
            #expect(!Self.hasControl(output.replacingOccurrences(of: "\n", with: "")), "\(output.debugDescription)")
            if arguments.count == 1 {
                #expect(output.contains("Groceries fake line"), "\(output)")
                #expect(output.split(separator: "\n").count == 1)
            } else {
                let rows = try JSONParser.parse(Array(output.utf8)).arrayValue
                #expect(rows?.first?["name"]?.stringValue == "\u{1B}]0;owned\u{07}\u{1B}[2JGroceries\n\u{9B}31mfake line")
            }
        }
        await stack.shutdown()
    }
}
