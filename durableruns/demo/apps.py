from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "durableruns.demo"
    label = "demo"
    verbose_name = "durableruns demo providers"
