// Issue 21: every configurable class lists its config fields once (nn::ConfigVisitor); model files,
// layer_config / optimizer_config / loss_config and their readers all go through that list.
// The configs below were written by soma before the schema existed (format version 2): the
// schema must write them byte for byte, and read them back to the same object.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "error_testing.hpp"
#include "soma/model/serialization.hpp"
#include "soma/soma.hpp"

using namespace soma;
using soma::testing::error_of;

namespace {

struct Sample {
  std::string kind;  // "layer", "optimizer" or "loss"
  std::function<std::string()> config;
};

// Non-default values everywhere, so that a field written from the wrong member shows.
std::map<std::string, Sample> samples() {
  namespace I = nn::init;
  auto layer = [](auto make) {
    return Sample{"layer", [make] {
                    nn::ModuleRef m = make();
                    m->set_name("l");
                    return serialization::layer_config(*m);
                  }};
  };
  auto opt = [](auto make) { return Sample{"optimizer", [make] { return serialization::optimizer_config(make()); }}; };
  auto loss = [](auto make) { return Sample{"loss", [make] { return serialization::loss_config(make()); }}; };
  return {
      {"Dense", layer([] {
         return nn::Dense(7, nn::relu,
                          {.use_bias = false, .kernel_initializer = I::he_normal(), .bias_initializer = I::ones(),
                           .kernel_regularizer = nn::regularizers::l2(0.5), .dtype = DType::f64});
       })},
      {"DenseDefault", layer([] { return nn::Dense(3); })},
      {"Conv2D", layer([] {
         return nn::Conv2D(4, {3, 2},
                           {.strides = {2, 1}, .padding = "same", .dilation_rate = 2, .groups = 1,
                            .activation = nn::gelu, .bias_regularizer = nn::regularizers::l1_l2(0.1, 0.2)});
       })},
      {"Conv2DExplicitPadding", layer([] { return nn::Conv2D(4, 3, {.padding = Padding(1, 2, 3, 4)}); })},
      {"Conv1D", layer([] {
         return nn::Conv1D(4, 5, {.strides = 2, .padding = "same", .dilation_rate = 1, .groups = 2,
                                  .activation = nn::relu, .use_bias = false});
       })},
      {"Conv2DTranspose", layer([] {
         return nn::Conv2DTranspose(3, {4, 4}, {.strides = 2, .padding = "same", .output_padding = Size2(1, 0)});
       })},
      {"Conv2DTransposeDefault", layer([] { return nn::Conv2DTranspose(3, 2); })},
      {"MaxPool2D", layer([] { return nn::MaxPool2D({3, 2}, Size2(1, 2), "same"); })},
      {"AvgPool2D", layer([] { return nn::AvgPool2D(2); })},
      {"GlobalAveragePooling2D", layer([] { return nn::GlobalAveragePooling2D(true); })},
      {"Conv3D", layer([] {
         return nn::Conv3D(4, {3, 2, 1},
                           {.strides = {2, 1, 1}, .padding = "same", .dilation_rate = {1, 2, 1}, .groups = 2,
                            .activation = nn::relu, .use_bias = false,
                            .data_format = nn::DataFormat::channels_last});
       })},
      {"MaxPool3D", layer([] { return nn::MaxPool3D({3, 2, 2}, nn::Size3{1, 2, 2}, "same"); })},
      {"AvgPool3D", layer([] { return nn::AvgPool3D({2}, std::nullopt, "valid", nn::DataFormat::channels_last); })},
      {"GlobalAveragePooling3D", layer([] { return nn::GlobalAveragePooling3D(true); })},
      {"GlobalMaxPooling2D", layer([] { return nn::GlobalMaxPooling2D(false, nn::DataFormat::channels_last); })},
      {"GlobalMaxPooling1D", layer([] { return nn::GlobalMaxPooling1D(true); })},
      {"Flatten", layer([] { return nn::Flatten(); })},
      {"Reshape", layer([] { return nn::Reshape({2, -1}); })},
      {"Dropout", layer([] { return nn::Dropout(0.25, 3); })},
      {"DropoutUnseeded", layer([] { return nn::Dropout(0.5); })},
      {"Activation", layer([] { return nn::ActivationLayer("swish"); })},
      {"ActivationLinear", layer([] { return nn::ActivationLayer(nn::Activation()); })},
      {"ReLU", layer([] { return nn::ReLU(); })},
      {"Sigmoid", layer([] { return nn::Sigmoid(); })},
      {"Tanh", layer([] { return nn::Tanh(); })},
      {"Step", layer([] { return nn::Step(); })},
      {"LeakyReLU", layer([] { return nn::LeakyReLU(0.1); })},
      {"ELU", layer([] { return nn::ELU(0.5); })},
      {"GELU", layer([] { return nn::GELU(true); })},
      {"Softmax", layer([] { return nn::Softmax(1); })},
      {"Embedding", layer([] {
         return nn::Embedding(10, 2, {.embeddings_initializer = I::random_normal(), .dtype = DType::f64});
       })},
      {"BatchNormalization", layer([] {
         return nn::BatchNormalization({.axis = 1, .momentum = 0.5, .epsilon = 1e-5, .center = false,
                                        .moving_variance_initializer = I::constant(2.0),
                                        .gamma_regularizer = nn::regularizers::l1(0.01)});
       })},
      {"LayerNormalization", layer([] { return nn::LayerNormalization({.axis = {1, 2}, .epsilon = 1e-6, .scale = false}); })},
      {"Normalization", layer([] { return nn::Normalization({.mean = {1.0, 2.0}, .variance = {4.0, 9.0}, .invert = true}); })},
      {"NormalizationGlobal", layer([] { return nn::Normalization({.axis = std::nullopt}); })},
      {"SimpleRNN", layer([] {
         return nn::SimpleRNN(4, {.activation = nn::relu, .recurrent_initializer = I::glorot_normal(),
                                  .recurrent_regularizer = nn::regularizers::l2(0.1), .return_sequences = true});
       })},
      {"LSTM", layer([] {
         return nn::LSTM(4, {.recurrent_activation = nn::tanh, .unit_forget_bias = false, .return_state = true,
                             .go_backwards = true});
       })},
      {"GRU", layer([] { return nn::GRU(4, {.use_bias = false, .reset_after = false, .dtype = DType::f64}); })},
      {"Add", layer([] { return nn::Add(); })},
      {"Multiply", layer([] { return nn::Multiply(); })},
      {"Average", layer([] { return nn::Average(); })},
      {"Concatenate", layer([] { return nn::Concatenate(1); })},
      {"Sequential", layer([] { return nn::Sequential{nn::Input({4}), nn::Dense(3), nn::Dropout(0.1)}; })},

      {"SGD", opt([] { return optim::SGD({.learning_rate = 0.5, .momentum = 0.9, .nesterov = true, .clipnorm = 1.0}); })},
      {"Adam", opt([] { return optim::Adam({.beta_1 = 0.8, .amsgrad = true, .weight_decay = 0.1, .clipvalue = 2.0}); })},
      {"AdamW", opt([] { return optim::AdamW({.learning_rate = 0.002, .epsilon = 1e-6, .global_clipnorm = 3.0}); })},
      {"Nadam", opt([] { return optim::Nadam({.beta_2 = 0.99}); })},
      {"RMSprop", opt([] { return optim::RMSprop({.rho = 0.8, .momentum = 0.1, .centered = true}); })},
      {"Adagrad", opt([] { return optim::Adagrad({.initial_accumulator_value = 0.2}); })},
      {"SGDExponentialDecay", opt([] {
         return optim::SGD({.learning_rate = optim::ExponentialDecay(
                                {.initial_learning_rate = 0.1, .decay_steps = 10, .decay_rate = 0.5, .staircase = true})});
       })},
      {"AdamCosineDecay", opt([] {
         return optim::Adam({.learning_rate = optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 100,
                                                                  .alpha = 0.1, .warmup_target = 0.2, .warmup_steps = 5})});
       })},
      {"AdamCosineDecayNoWarmup", opt([] {
         return optim::Adam({.learning_rate = optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 100})});
       })},
      {"RMSpropPiecewise", opt([] {
         return optim::RMSprop({.learning_rate = optim::PiecewiseConstantDecay({10, 20}, {0.1, 0.01, 0.001})});
       })},
      {"AdagradStepDecay", opt([] {
         return optim::Adagrad({.learning_rate = optim::StepDecay({.initial_learning_rate = 0.1, .step_size = 3, .gamma = 0.5})});
       })},

      {"MeanSquaredError", loss([] { return nn::MeanSquaredError(); })},
      {"MeanAbsoluteError", loss([] { return nn::MeanAbsoluteError({.reduction = nn::Reduction::Sum}); })},
      {"Huber", loss([] { return nn::Huber({.delta = 0.25, .reduction = nn::Reduction::None}); })},
      {"BinaryCrossentropy", loss([] { return nn::BinaryCrossentropy({.from_logits = true, .label_smoothing = 0.1}); })},
      {"CategoricalCrossentropy", loss([] {
         return nn::CategoricalCrossentropy({.label_smoothing = 0.2, .axis = 1, .reduction = nn::Reduction::Sum});
       })},
      {"SparseCategoricalCrossentropy", loss([] { return nn::SparseCategoricalCrossentropy({.from_logits = true}); })},
      {"Crossentropy", loss([] { return nn::Crossentropy({.reduction = nn::Reduction::None}); })},
  };
}

// Written by soma 0.1 (before the schema), format version 2.
const std::map<std::string, std::string> kGolden = {
#include "config_schema_golden.inc"
};

std::string reread(const Sample& s, const std::string& text) {
  if (s.kind == "layer") {
    auto m = serialization::layer_from_config(text);
    return serialization::layer_config(*m);
  }
  if (s.kind == "optimizer") return serialization::optimizer_config(*serialization::optimizer_from_config(text));
  return serialization::loss_config(*serialization::loss_from_config(text));
}

TEST(ConfigSchema, ConfigsAreWrittenAsBeforeTheSchema) {
  for (const auto& [tag, s] : samples()) {
    const std::string now = s.config();
    if (std::getenv("SOMA_PRINT_CONFIG_GOLDEN")) std::printf("{\"%s\", R\"(%s)\"},\n", tag.c_str(), now.c_str());
    auto it = kGolden.find(tag);
    if (it == kGolden.end()) {
      ADD_FAILURE() << tag << " has no golden config: " << now;
      continue;
    }
    EXPECT_EQ(now, it->second) << tag;
  }
}

TEST(ConfigSchema, GoldenConfigsReadBackToTheSameConfig) {
  const auto all = samples();
  for (const auto& [tag, text] : kGolden) {
    auto it = all.find(tag);
    ASSERT_NE(it, all.end()) << tag;
    std::string back;
    try {
      back = reread(it->second, text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": " << e.what();
      continue;
    }
    EXPECT_EQ(back, text) << tag;
  }
}

TEST(ConfigSchema, AWrongFieldNamesTheFieldAndTheLayer) {
  const std::string e = error_of([] {
    serialization::layer_from_config(R"({"class_name":"Dense","config":{"name":"d","units":"many","activation":"linear",)"
                                     R"("use_bias":true,"kernel_initializer":"zeros","bias_initializer":"zeros",)"
                                     R"("kernel_regularizer":null,"bias_regularizer":null,"dtype":"f32"}})");
  });
  EXPECT_NE(e.find("'units'"), std::string::npos) << e;
  EXPECT_NE(e.find("Dense"), std::string::npos) << e;
}

TEST(ConfigSchema, AMissingFieldNamesTheField) {
  const std::string e = error_of([] {
    serialization::layer_from_config(R"({"class_name":"Dropout","config":{"name":"d"}})");
  });
  EXPECT_NE(e.find("'rate'"), std::string::npos) << e;
  EXPECT_NE(e.find("Dropout"), std::string::npos) << e;
}

}  // namespace
