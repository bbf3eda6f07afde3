import Logging

/// Sets up logging once per process (executables only; tests never call it).
public enum RoundupLogging {
    public static func bootstrap(level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}
