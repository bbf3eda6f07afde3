public import Logging
import RoundupCore
public import RoundupRedis

extension RedisClient {
    /// The client `ROUNDUP_REDIS_URL` and `ROUNDUP_REDIS_CA_FILE` describe.
    public static func make(configuration: RoundupConfiguration, logger: Logger) throws -> RedisClient {
        var redisConfiguration = try RedisConfiguration(url: configuration.redisURL)
        redisConfiguration.caFile = configuration.redisCAFile
        return RedisClient(configuration: redisConfiguration, logger: logger)
    }
}
