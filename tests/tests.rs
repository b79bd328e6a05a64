mod webhook_config;
